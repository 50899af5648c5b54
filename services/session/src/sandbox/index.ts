export { SandboxDriver, sandboxDriverFactory, type SandboxOptions } from './driver.ts';
export { outcomeFor, receiptsFor, destinationJid, type SendOutcome } from './outcomes.ts';
