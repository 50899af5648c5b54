// The NetworkDriver contract, reusable by every driver (sandbox here; the Baileys driver against
// its fake WhatsApp server). A harness says how the network side is driven: completing a scan,
// making a message arrive. The suite checks what the session worker relies on.
import assert from 'node:assert/strict';
import {
  defaultSettings,
  type AuthStore,
  type ConnectionState,
  type DriverContext,
  type DriverListener,
  type InboundMessage,
  type NetworkDriver,
  type Receipt,
} from '@switchboard/core';

export interface DriverHarness {
  create(ctx: DriverContext): NetworkDriver;
  /** Completes QR pairing from the network side as `phone`. */
  scan(driver: NetworkDriver, phone: string): Promise<void>;
  /** Makes a text message from `fromPhone` arrive; returns its message id. */
  deliverText(driver: NetworkDriver, fromPhone: string, text: string, name: string): Promise<string>;
  /** A destination phone whose sends get sent, delivered and read receipts. */
  okDestination: string;
  close(): Promise<void>;
}

/** An AuthStore in memory, as the contract needs no database for credentials. */
export class MemoryAuthStore implements AuthStore {
  readonly data = new Map<string, unknown>();
  async get(category: string, ids: string[]): Promise<Record<string, unknown>> {
    const out: Record<string, unknown> = {};
    for (const id of ids) if (this.data.has(`${category}/${id}`)) out[id] = this.data.get(`${category}/${id}`);
    return out;
  }
  async set(batch: Record<string, Record<string, unknown | null>>): Promise<void> {
    for (const [category, entries] of Object.entries(batch)) {
      for (const [id, v] of Object.entries(entries)) {
        if (v === null || v === undefined) this.data.delete(`${category}/${id}`);
        else this.data.set(`${category}/${id}`, structuredClone(v));
      }
    }
  }
  async clear(): Promise<void> {
    this.data.clear();
  }
}

/** Records everything a driver reports; `until` waits for a condition. */
export class RecordingListener implements DriverListener {
  states: { state: ConnectionState; qr?: string | null; phone?: string | null; reason?: string | null }[] = [];
  messages: InboundMessage[] = [];
  receipts: Receipt[] = [];
  async onState(state: ConnectionState, info: { qr?: string | null; phone?: string | null; reason?: string | null }): Promise<void> {
    this.states.push({ state, ...info });
  }
  async onMessage(msg: InboundMessage): Promise<void> {
    this.messages.push(msg);
  }
  async onReceipt(receipt: Receipt): Promise<void> {
    this.receipts.push(receipt);
  }
  async onPresence(): Promise<void> {}
  get state(): ConnectionState | undefined {
    return this.states.at(-1)?.state;
  }
}

export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export function driverContract(name: string, makeHarness: () => Promise<DriverHarness>): void {
  describe(`NetworkDriver contract: ${name}`, function () {
    let harness: DriverHarness;
    let auth: MemoryAuthStore;
    let listener: RecordingListener;
    let driver: NetworkDriver;
    const instanceId = 'inst-contract';

    beforeEach(async () => {
      harness = await makeHarness();
      auth = new MemoryAuthStore();
      listener = new RecordingListener();
      driver = harness.create({ instanceId, auth, listener, isOwnSend: async () => false, settings: defaultSettings });
    });
    afterEach(async () => {
      await driver.disconnect();
      await harness.close();
    });

    async function connected(phone = '5511999990001'): Promise<void> {
      await driver.connect();
      await until(() => listener.state === 'awaiting_scan', 'awaiting_scan');
      await harness.scan(driver, phone);
      await until(() => listener.state === 'connected', 'connected');
    }

    it('connects to awaiting_scan with a QR when there are no credentials', async () => {
      await driver.connect();
      await until(() => listener.state === 'awaiting_scan', 'awaiting_scan');
      const qr = listener.states.at(-1)!.qr;
      assert.equal(typeof qr, 'string');
      assert.ok(qr!.length > 20);
    });

    it('a scan connects it as the scanned phone and saves credentials', async () => {
      await connected('5511988887777');
      assert.equal(listener.states.at(-1)!.phone, '5511988887777');
      assert.ok(auth.data.size > 0, 'credentials saved');
    });

    it('reconnects from saved credentials without a new scan', async () => {
      await connected('5511988887777');
      await driver.disconnect();
      const again = new RecordingListener();
      driver = harness.create({ instanceId, auth, listener: again, isOwnSend: async () => false, settings: defaultSettings });
      await driver.connect();
      await until(() => again.state === 'connected', 'connected from saved credentials');
      assert.ok(!again.states.some((s) => s.state === 'awaiting_scan'));
    });

    it('sends a text and reports receipts for its id, in order', async () => {
      await connected();
      await driver.send({ messengerId: '3EB0AAAABBBBCCCCDD0001', to: { kind: 'phone', phone: harness.okDestination }, type: 'text', text: 'hello' });
      await until(() => listener.receipts.some((r) => r.status === 'read'), 'read receipt');
      const statuses = listener.receipts.filter((r) => r.messengerId === '3EB0AAAABBBBCCCCDD0001').map((r) => r.status);
      assert.deepEqual(statuses.filter((s) => s !== 'sent'), ['delivered', 'read']);
    });

    it('reports an inbound text with normalised fields', async () => {
      await connected();
      const id = await harness.deliverText(driver, '5511977776666', 'hi there', 'Ana');
      await until(() => listener.messages.some((m) => m.messageId === id), 'inbound message');
      const msg = listener.messages.find((m) => m.messageId === id)!;
      assert.equal(msg.from, '5511977776666@s.whatsapp.net');
      assert.equal(msg.phone, '5511977776666');
      assert.equal(msg.fromMe, false);
      assert.equal(msg.isGroup, false);
      assert.equal(msg.participant, null);
      assert.equal(msg.type, 'text');
      assert.equal(msg.text, 'hi there');
      assert.equal(msg.name, 'Ana');
    });

    it('logout clears the credentials and reports logged_out', async () => {
      await connected();
      await driver.logout();
      assert.equal(auth.data.size, 0);
      assert.equal(listener.state, 'logged_out');
    });

    it('issues pairing codes shaped like the network\'s while awaiting pairing', async () => {
      await driver.connect();
      await until(() => listener.state === 'awaiting_scan', 'awaiting_scan');
      const asked = Date.now();
      const { code, expiresAt } = await driver.requestPairingCode('5511988887777');
      assert.match(code, /^[A-Z0-9]{4}-[A-Z0-9]{4}$/);
      assert.ok(expiresAt.getTime() > asked + 60_000, `a code works for minutes, not until ${expiresAt.toISOString()}`);
    });
  });
}
