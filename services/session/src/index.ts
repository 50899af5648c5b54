// The session package: the per-instance worker, runtimes (embedded and cluster), drivers, sweeper.
export { SessionWorker, type SessionWorkerOptions } from './worker.ts';
export { LocalSessionRuntime, type LocalRuntimeOptions } from './local-runtime.ts';
export { RemoteSessionRuntime, type RemoteRuntimeOptions } from './remote-runtime.ts';
export { serveSessionRpc, SESSION_RPC_OPS } from './rpc-server.ts';
export { expirySweepIntervalMs, startExpirySweeper, type ExpirySweeper, type ExpirySweeperOptions } from './expiry-sweeper.ts';
export { driverFactoryFor, type DriverDeps } from './drivers.ts';
export { mediaArchive, type MediaArchive, type MediaArchiveOptions } from './media-archive.ts';
export { callSessionOp, SANDBOX_OPS } from './session-ops.ts';
export { isExpired, markExpired, type SendItemRow } from './send-items.ts';
export { requeueQueuedCommands } from './command-requeue.ts';
export { SandboxDriver, sandboxDriverFactory, type SandboxOptions } from './sandbox/driver.ts';
