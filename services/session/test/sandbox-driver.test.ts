// The sandbox driver against the driver contract, plus its own rules (DESIGN §6).
import assert from 'node:assert/strict';
import { defaultSettings, Problem, SendError, type Db } from '@switchboard/core';
import { openTestDatabase } from '../../../test/support/services.ts';
import { SandboxDriver } from '../src/sandbox/driver.ts';
import { driverContract, MemoryAuthStore, RecordingListener, until } from './driver-contract.ts';

let db: Db;
let drop: () => Promise<void>;

before(async () => {
  ({ db, drop } = await openTestDatabase());
  // The ledger's rows belong to an instance (they go with it).
  const ids = ['inst-contract', 'inst-rules', 'inst-code-ttl', 'inst-spaced', 'inst-ordered', 'inst-owed', 'inst-echo-owed', 'inst-repaired', 'inst-closing'];
  await db('instances').insert(ids.map((id) => ({ id, name: id, token_hash: id, token_sealed: 'x' })));
});
after(async () => drop?.());

driverContract('sandbox', async () => ({
  create: (ctx) => new SandboxDriver(ctx, { db, receiptDelayMs: 5, reconnectDelayMs: 5 }),
  scan: async (driver, phone) => void (await driver.sandbox!('scan', { phone })),
  deliverText: async (driver, from, text, name) => (await driver.sandbox!('inbound', { from, type: 'text', text, name })).messageId as string,
  okDestination: '5511912345678',
  close: async () => undefined,
}));

describe('sandbox driver rules', () => {
  let listener: RecordingListener;
  let driver: SandboxDriver;
  let settings = defaultSettings();

  beforeEach(async () => {
    listener = new RecordingListener();
    settings = defaultSettings();
    driver = new SandboxDriver(
      { instanceId: 'inst-rules', auth: new MemoryAuthStore(), listener, isOwnSend: async () => false, settings: () => settings },
      { db, receiptDelayMs: 5, reconnectDelayMs: 5, qrRefreshMs: 30 },
    );
    await driver.connect();
  });
  afterEach(() => driver.disconnect());

  async function rejects(p: Promise<unknown>, status: number, code: string) {
    await assert.rejects(p, (err: unknown) => err instanceof Problem && err.status === status && err.code === code);
  }

  it('refreshes the QR while awaiting a scan', async () => {
    await until(() => listener.states.filter((s) => s.state === 'awaiting_scan').length >= 3, 'QR refreshes');
    const qrs = new Set(listener.states.map((s) => s.qr));
    assert.ok(qrs.size >= 3);
  });

  it('scan outside awaiting_scan is 409; bad phone is 400', async () => {
    await rejects(driver.sandbox('scan', { phone: 'abc' }), 400, 'validation_failed');
    await driver.sandbox('scan', { phone: '5511911112222' });
    await rejects(driver.sandbox('scan', { phone: '5511911112222' }), 409, 'not_awaiting_scan');
  });

  it('of concurrent scans one pairs, and the others are 409', async () => {
    const phones = ['5511911110001', '5511911110002', '5511911110003'];
    const results = await Promise.allSettled(phones.map((phone) => driver.sandbox('scan', { phone })));
    const paired = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.phone] : []));
    assert.equal(paired.length, 1);
    for (const r of results) if (r.status === 'rejected') assert.ok(r.reason instanceof Problem && r.reason.status === 409 && r.reason.code === 'not_awaiting_scan');
    assert.deepEqual(listener.states.filter((s) => s.state === 'connected').map((s) => s.phone), paired);
  });

  it('of concurrent drops one logs out, and the others are 409', async () => {
    await driver.sandbox('scan', { phone: '5511911110004' });
    const results = await Promise.allSettled([1, 2, 3].map(() => driver.sandbox('drop', { reason: 'logged_out' })));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) if (r.status === 'rejected') assert.ok(r.reason instanceof Problem && r.reason.status === 409 && r.reason.code === 'not_connected');
    assert.equal(listener.states.filter((s) => s.state === 'logged_out').length, 1);
  });

  it('ends a pairing nobody completes after pairingTimeoutMs (logged_out, pairing_timeout); a pairing code starts the time again', async () => {
    const own = new RecordingListener();
    const timed = new SandboxDriver(
      { instanceId: 'inst-rules', auth: new MemoryAuthStore(), listener: own, isOwnSend: async () => false, settings: () => settings },
      { db, receiptDelayMs: 5, qrRefreshMs: 30, pairingTimeoutMs: 3000 },
    );
    const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    try {
      await timed.connect();
      await pause(1500);
      await timed.requestPairingCode('5511933334444');
      await pause(2000); // 3.5 s since the first QR, 2 s since the code
      assert.equal(own.state, 'awaiting_scan', 'the code started the time again');
      await until(() => own.state === 'logged_out', 'given up', 5000);
      assert.deepEqual(own.states.at(-1), { state: 'logged_out', reason: 'pairing_timeout' });
      const shown = own.states.length;
      await pause(100);
      assert.equal(own.states.length, shown, 'no QR codes after it');
      await rejects(timed.sandbox('scan', { phone: '5511933334444' }), 409, 'not_awaiting_scan');
      await rejects(timed.requestPairingCode('5511933334444'), 409, 'not_pairing');
    } finally {
      await timed.disconnect();
    }
  });

  it('pair needs the last issued code', async () => {
    await rejects(driver.sandbox('pair', { code: 'AAAA-BBBB' }), 409, 'no_pairing_code');
    const { code: first } = await driver.requestPairingCode('5511933334444');
    const { code } = await driver.requestPairingCode('5511933334444');
    assert.notEqual(first, code);
    await rejects(driver.sandbox('pair', { code: first }), 400, 'invalid_pairing_code');
    await driver.sandbox('pair', { code: code.replace('-', '').toLowerCase() }); // typed as on a phone
    assert.equal(listener.state, 'connected');
    assert.equal(listener.states.at(-1)!.phone, '5511933334444');
    await rejects(driver.requestPairingCode('5511933334444'), 409, 'already_connected');
  });

  it('a pairing code works until its expiresAt, then a new one is needed', async () => {
    const own = new RecordingListener(); // not the QR-refreshing driver's of beforeEach
    const shortLived = new SandboxDriver(
      { instanceId: 'inst-code-ttl', auth: new MemoryAuthStore(), listener: own, isOwnSend: async () => false, settings: () => settings },
      { db, receiptDelayMs: 5, pairingCodeTtlMs: 200 },
    );
    await shortLived.connect();
    try {
      const { code, expiresAt } = await shortLived.requestPairingCode('5511933334444');
      await new Promise((r) => setTimeout(r, Math.max(0, expiresAt.getTime() - Date.now()) + 10));
      await rejects(shortLived.sandbox('pair', { code }), 409, 'pairing_code_expired');
      assert.equal(own.state, 'awaiting_scan', 'still waiting: the phone may take a new code');
      const fresh = await shortLived.requestPairingCode('5511933334444');
      await shortLived.sandbox('pair', { code: fresh.code });
      assert.equal(own.state, 'connected');
    } finally {
      await shortLived.disconnect();
    }
  });

  it('magic destinations select the outcome', async () => {
    await driver.sandbox('scan', { phone: '5511911112222' });
    const send = (digits: string, id: string) => driver.send({ messengerId: id, to: { kind: 'phone', phone: digits }, type: 'text', text: 'x' });
    await assert.rejects(send('5511900000000', 'M0'), (e: unknown) => e instanceof SendError && e.definite && e.code === 'rejected');
    await assert.rejects(send('5511900000004', 'M4'), (e: unknown) => e instanceof SendError && e.definite && e.code === 'not_on_network');
    await send('5511900000002', 'M2');
    await until(() => listener.receipts.some((r) => r.messengerId === 'M2' && r.status === 'delivered'), 'delivered');
    await new Promise((r) => setTimeout(r, 40));
    assert.ok(!listener.receipts.some((r) => r.messengerId === 'M2' && r.status === 'read'), '0002 is never read');
    await assert.rejects(send('5511900000001', 'M1'), (e: unknown) => e instanceof SendError && !e.definite);
    await until(() => listener.states.some((s) => s.state === 'reconnecting'), 'reconnecting');
    await until(() => listener.state === 'connected', 'connected again');
    const ledger = await db('sandbox_ledger').where({ instance_id: 'inst-rules' }).whereIn('messenger_id', ['M0', 'M1', 'M2', 'M4']).pluck('messenger_id');
    assert.deepEqual(ledger.sort(), ['M1', 'M2']);
  });

  it("the ledger goes with its instance (the recipients' numbers and owed echoes do not stay)", async () => {
    await db('instances').insert({ id: 'inst-gone', name: 'gone', token_hash: 'inst-gone', token_sealed: 'x' });
    const doomed = new SandboxDriver({ instanceId: 'inst-gone', auth: new MemoryAuthStore(), listener: new RecordingListener(), isOwnSend: async () => true, settings: () => settings }, { db, receiptDelayMs: 1000, reconnectDelayMs: 5 });
    try {
      await doomed.connect();
      await doomed.sandbox('scan', { phone: '5511911113333' });
      await doomed.send({ messengerId: 'GONE1', to: { kind: 'phone', phone: '5511912345678' }, type: 'text', text: 'x' });
      assert.equal((await db('sandbox_ledger').where({ instance_id: 'inst-gone' })).length, 1);
    } finally {
      await doomed.disconnect();
    }
    await db('instances').where({ id: 'inst-gone' }).delete();
    assert.equal((await db('sandbox_ledger').where({ instance_id: 'inst-gone' })).length, 0);
  });

  it('voice notes are played; announcement groups fail only with protection on', async () => {
    await driver.sandbox('scan', { phone: '5511911112222' });
    await driver.send({ messengerId: 'V1', to: { kind: 'phone', phone: '5511955556666' }, type: 'audio', ptt: true, mimetype: 'audio/ogg', media: new Uint8Array([1]) });
    await until(() => listener.receipts.some((r) => r.messengerId === 'V1' && r.status === 'played'), 'played');
    // Without the protection such a group is like any other destination (DESIGN §6: "anything else").
    await driver.send({ messengerId: 'G0', to: { kind: 'group', groupId: '120363000000000003' }, type: 'text', text: 'x' });
    await until(() => listener.receipts.some((r) => r.messengerId === 'G0' && r.status === 'read'), 'read in the unprotected group');
    settings = { ...defaultSettings(), protectAnnouncementGroups: true };
    await assert.rejects(
      driver.send({ messengerId: 'G1', to: { kind: 'group', groupId: '120363000000000003' }, type: 'text', text: 'x' }),
      (e: unknown) => e instanceof SendError && e.code === 'announcement_group' && e.definite,
    );
  });

  it('echoes API sends as own messages and normalises group and LID senders', async () => {
    await driver.sandbox('scan', { phone: '5511911112222' });
    await driver.send({ messengerId: 'E1', to: { kind: 'phone', phone: '5511955556666' }, type: 'text', text: 'echo me' });
    await until(() => listener.messages.some((m) => m.messageId === 'E1'), 'echo');
    const echo = listener.messages.find((m) => m.messageId === 'E1')!;
    assert.equal(echo.fromMe, true);
    assert.equal(echo.text, 'echo me');

    await driver.sandbox('inbound', { from: '5511977776666', type: 'text', text: 'g', group: '120363111@g.us' });
    const g = listener.messages.at(-1)!;
    assert.deepEqual([g.from, g.participant, g.phone, g.isGroup], ['120363111@g.us', '5511977776666@s.whatsapp.net', '5511977776666', true]);

    await driver.sandbox('inbound', { from: '5511977776666', type: 'text', text: 'l', lid: '123456789@lid' });
    const l = listener.messages.at(-1)!;
    assert.deepEqual([l.from, l.chatLid, l.phone], ['123456789@lid', '123456789@lid', '5511977776666']);

    await rejects(driver.sandbox('inbound', { from: '5511977776666', type: 'image' }), 400, 'validation_failed');
    await rejects(driver.sandbox('inbound', { from: 'x', type: 'nope' }), 400, 'validation_failed');
  });

  it('spaces receipts by the delay from the send itself: delivered one delay after the send, not two', async () => {
    const spaced = new RecordingListener();
    const seen = new Map<string, number>();
    const onReceipt = spaced.onReceipt.bind(spaced);
    spaced.onReceipt = async (r) => {
      seen.set(r.status, performance.now());
      await onReceipt(r);
    };
    const ctx = { instanceId: 'inst-spaced', auth: new MemoryAuthStore(), listener: spaced, isOwnSend: async () => false, settings: () => settings };
    const paced = new SandboxDriver(ctx, { db, receiptDelayMs: 1000, reconnectDelayMs: 5 });
    try {
      await paced.connect();
      await paced.sandbox('scan', { phone: '5511911113333' });
      const sentAt = performance.now();
      await paced.send({ messengerId: 'PACED1', to: { kind: 'phone', phone: '5511955557777' }, type: 'text', text: 'x' });
      await until(() => seen.has('delivered'), 'the delivered receipt', 5000);
      const after = seen.get('delivered')! - sentAt;
      // One delay (1 s); the old schedule took two. The margin is for a slow timer, not a bound on speed.
      assert.ok(after >= 990 && after < 1800, `delivered ${Math.round(after)} ms after the send`);
    } finally {
      await paced.disconnect();
    }
  });

  it("delivers a message's receipts in order even after the event loop was busy", async () => {
    const listener = new RecordingListener();
    const order: string[] = [];
    const onReceipt = listener.onReceipt.bind(listener);
    listener.onReceipt = async (r) => {
      order.push(`${r.messengerId}:${r.status}`);
      await onReceipt(r);
    };
    const ctx = { instanceId: 'inst-ordered', auth: new MemoryAuthStore(), listener, isOwnSend: async () => false, settings: () => settings };
    const driver = new SandboxDriver(ctx, { db, receiptDelayMs: 200, reconnectDelayMs: 5 });
    const to = { kind: 'phone' as const, phone: '5511955557777' };
    try {
      await driver.connect();
      await driver.sandbox('scan', { phone: '5511911114444' });
      await driver.send({ messengerId: 'FIRST', to, type: 'text', text: 'x' });
      await until(() => order.includes('FIRST:delivered'), 'the first message delivered', 5000);
      // The second message's receipts are due while the first one's read is still pending; then the
      // event loop is busy past all of them (a slow statement, a large JSON body).
      await driver.send({ messengerId: 'SECOND', to, type: 'text', text: 'y' });
      const busyUntil = performance.now() + 700;
      while (performance.now() < busyUntil);
      await until(() => order.filter((o) => o.startsWith('SECOND:')).length === 3, 'the second message read', 5000);
      assert.deepEqual(order.filter((o) => o.startsWith('SECOND:')), ['SECOND:sent', 'SECOND:delivered', 'SECOND:read']);
    } finally {
      await driver.disconnect();
    }
  });

  it('owes receipts the session was not there to take, and delivers them when it connects again', async () => {
    const auth = new MemoryAuthStore();
    const ctx = (l: RecordingListener) => ({ instanceId: 'inst-owed', auth, listener: l, isOwnSend: async () => false, settings: () => settings });
    const slow = { db, receiptDelayMs: 200, reconnectDelayMs: 5 };
    const first = new SandboxDriver(ctx(listener), slow);
    await first.connect();
    await first.sandbox('scan', { phone: '5511911112222' });
    await first.send({ messengerId: 'OWED1', to: { kind: 'phone', phone: '5511955556666' }, type: 'text', text: 'x' });
    await first.disconnect(); // stopped before `delivered` was due (`sent`, due at once, may have come)

    const next = new RecordingListener();
    const second = new SandboxDriver(ctx(next), slow);
    try {
      await second.connect();
      await until(() => next.receipts.some((r) => r.messengerId === 'OWED1' && r.status === 'read'), 'the owed read receipt', 5000);
      const took = (l: RecordingListener) => l.receipts.filter((r) => r.messengerId === 'OWED1').map((r) => r.status);
      assert.ok(took(listener).every((s) => s === 'sent'), 'the first connection got no later receipt');
      assert.deepEqual([...took(listener), ...took(next)], ['sent', 'delivered', 'read'], 'each receipt once, in order');
      await until(async () => ((await db('sandbox_ledger').where({ messenger_id: 'OWED1' }).first('receipts_owed')).receipts_owed as string[]).length === 0, 'the ledger settled');
    } finally {
      await second.disconnect();
    }
  });

  it('owes the echo of a send the session did not take, and delivers it when it connects again (a medium without its bytes)', async () => {
    const auth = new MemoryAuthStore();
    const ctx = (l: RecordingListener) => ({ instanceId: 'inst-echo-owed', auth, listener: l, isOwnSend: async () => true, settings: () => settings });
    const failing = new RecordingListener();
    failing.onMessage = async () => {
      throw new Error('the database is down'); // the session could not take the echo
    };
    const first = new SandboxDriver(ctx(failing), { db, receiptDelayMs: 5, reconnectDelayMs: 5 });
    await first.connect();
    await first.sandbox('scan', { phone: '5511911112222' });
    await first.send({ messengerId: 'ECHO1', to: { kind: 'phone', phone: '5511955556666' }, type: 'text', text: 'owed text' });
    await first.send({ messengerId: 'ECHO2', to: { kind: 'lid', lid: '123456789' }, type: 'image', mimetype: 'image/png', caption: 'pic', media: new Uint8Array([1, 2, 3]) });
    await first.disconnect(); // waits for the listener calls under way

    const next = new RecordingListener();
    const second = new SandboxDriver(ctx(next), { db, receiptDelayMs: 5, reconnectDelayMs: 5 });
    try {
      await second.connect();
      await until(() => next.messages.some((m) => m.messageId === 'ECHO2'), 'the owed echoes', 5000);
      assert.deepEqual(
        next.messages.map((m) => [m.messageId, m.fromMe, m.phone, m.chatLid, m.text]),
        [
          ['ECHO1', true, '5511955556666', null, 'owed text'],
          ['ECHO2', true, null, '123456789@lid', 'pic'],
        ],
      );
      const image = next.messages[1].media!;
      assert.equal(image.mimetype, 'image/png');
      await assert.rejects(image.download(), /no longer has this file/);
      const stillOwed = async () => db('sandbox_ledger').whereIn('messenger_id', ['ECHO1', 'ECHO2']).whereNotNull('echo_owed').count({ n: '*' }).first();
      await until(async () => Number((await stillOwed())!.n) === 0, 'the ledger settled');
    } finally {
      await second.disconnect();
    }
  });

  it('a new pairing (after a reset) gets nothing the network owed the earlier one', async () => {
    const ctx = (l: RecordingListener, auth: MemoryAuthStore) => ({ instanceId: 'inst-repaired', auth, listener: l, isOwnSend: async () => true, settings: () => settings });
    const failing = new RecordingListener();
    failing.onMessage = async () => {
      throw new Error('the database is down');
    };
    const first = new SandboxDriver(ctx(failing, new MemoryAuthStore()), { db, receiptDelayMs: 5000, reconnectDelayMs: 5 });
    await first.connect();
    await first.sandbox('scan', { phone: '5511911112222' });
    await first.send({ messengerId: 'OLD1', to: { kind: 'phone', phone: '5511955556666' }, type: 'text', text: 'before the reset' });
    await first.disconnect(); // its echo and its later receipts are owed

    const auth = new MemoryAuthStore(); // the reset cleared the credentials
    const paired = new RecordingListener();
    const second = new SandboxDriver(ctx(paired, auth), { db, receiptDelayMs: 5, reconnectDelayMs: 5 });
    await second.connect();
    await second.sandbox('scan', { phone: '5511933334444' });
    await second.disconnect();
    const third = new RecordingListener();
    const again = new SandboxDriver(ctx(third, auth), { db, receiptDelayMs: 5, reconnectDelayMs: 5 });
    try {
      await again.connect();
      await until(() => third.states.some((s) => s.state === 'connected'), 'connected with the new link');
      await new Promise((r) => setTimeout(r, 100)); // what would be owed comes right after `connected`
      const old = (l: RecordingListener) => [...l.messages.filter((m) => m.messageId === 'OLD1'), ...l.receipts.filter((r) => r.messengerId === 'OLD1')];
      assert.deepEqual([...old(paired), ...old(third)], []);
    } finally {
      await again.disconnect();
    }
  });

  it('refuses an arrival the session closed before taking, instead of answering for a message nobody recorded', async () => {
    let release!: () => void;
    let entered!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const firstTaken = new Promise<void>((r) => (entered = r));
    const slow = new RecordingListener();
    const onMessage = slow.onMessage.bind(slow);
    slow.onMessage = async (m) => {
      if (m.text === 'first') {
        entered();
        await gate;
      }
      await onMessage(m);
    };
    const closing = new SandboxDriver({ instanceId: 'inst-closing', auth: new MemoryAuthStore(), listener: slow, isOwnSend: async () => false, settings: () => settings }, { db, receiptDelayMs: 5, reconnectDelayMs: 5 });
    await closing.connect();
    await closing.sandbox('scan', { phone: '5511911112222' });
    const first = closing.sandbox('inbound', { from: '5511977776666', type: 'text', text: 'first' });
    await firstTaken;
    const second = closing.sandbox('inbound', { from: '5511977776666', type: 'text', text: 'second' });
    const stopped = closing.disconnect();
    release();
    assert.equal(typeof (await first).messageId, 'string', 'the one under way was taken');
    await rejects(second, 409, 'not_connected');
    await stopped;
    assert.deepEqual(slow.messages.map((m) => m.text), ['first']);
  });

  it('drop logged_out clears credentials; inbound needs a connection', async () => {
    await rejects(driver.sandbox('inbound', { from: '5511977776666', type: 'text', text: 'x' }), 409, 'not_connected');
    await driver.sandbox('scan', { phone: '5511911112222' });
    await driver.sandbox('drop', { reason: 'logged_out' });
    assert.equal(listener.state, 'logged_out');
    await rejects(driver.sandbox('drop', { reason: 'connection_lost' }), 409, 'not_connected');
    await rejects(driver.sandbox('drop', { reason: 'bogus' }), 400, 'validation_failed');
  });
});
