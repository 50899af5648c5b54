// The behaviour every Bus adapter must show (DESIGN §1): bus-memory.test.ts and
// bus-jetstream.test.ts run this same suite against their adapter.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { RpcError, subjects, type Bus, type BusMessage } from '../src/bus/types.ts';

/** Opens a bus on the suite's isolated backend (a fresh one per test is fine). */
export type OpenBus = () => Promise<Bus>;

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);

/** A fresh name per test, so tests never see each other's subjects or durables. */
function unique(prefix: string): string {
  return `${prefix}${randomBytes(5).toString('hex')}`;
}

export async function waitFor(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function defineBusContract(name: string, openBus: OpenBus): void {
  describe(`Bus contract: ${name}`, function () {
    let bus: Bus;

    beforeEach(async () => {
      bus = await openBus();
    });
    afterEach(async () => {
      await bus.close();
    });

    it('delivers a published message with its headers and msgId', async () => {
      const inst = unique('i');
      const got: BusMessage[] = [];
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable: unique('d') }, async (m) => {
        got.push(m);
      });
      await bus.publish(subjects.command(inst), text('hello'), { msgId: 'm-1', headers: { traceparent: '00-abc-def-01' } });
      await waitFor(() => got.length === 1, 'the message');
      assert.equal(got[0].subject, `cmd.${inst}`);
      assert.equal(str(got[0].data), 'hello');
      assert.equal(got[0].headers.traceparent, '00-abc-def-01');
      assert.equal(got[0].deliveryCount, 1);
      assert.equal(got[0].msgId, 'm-1');
      assert.ok(!Object.keys(got[0].headers).some((h) => h.toLowerCase().startsWith('nats-')), 'no reserved headers leak');
    });

    it('rejects a subject outside the streams', async () => {
      await assert.rejects(bus.publish('nowhere.at.all', text('x')));
    });

    it('drops a second publish with the same msgId', async () => {
      const inst = unique('i');
      const got: string[] = [];
      await bus.publish(subjects.command(inst), text('a'), { msgId: `${inst}-1` });
      await bus.publish(subjects.command(inst), text('a again'), { msgId: `${inst}-1` });
      await bus.publish(subjects.command(inst), text('b'), { msgId: `${inst}-2` });
      // maxAckPending 1 keeps order: a duplicate would arrive before 'b'.
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable: unique('d'), maxAckPending: 1 }, async (m) => {
        got.push(str(m.data));
      });
      await waitFor(() => got.includes('b'), "message 'b'");
      assert.deepEqual(got, ['a', 'b']);
    });

    it('processes strictly in order, one at a time, with maxAckPending 1', async () => {
      const inst = unique('i');
      const order: number[] = [];
      let running = 0;
      let maxRunning = 0;
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable: unique('d'), maxAckPending: 1 }, async (m) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await delay(15);
        order.push(Number(str(m.data)));
        running--;
      });
      for (let i = 0; i < 6; i++) await bus.publish(subjects.command(inst), text(String(i)), { msgId: `${inst}-${i}` });
      await waitFor(() => order.length === 6, 'six messages');
      assert.deepEqual(order, [0, 1, 2, 3, 4, 5]);
      assert.equal(maxRunning, 1);
    });

    it('runs up to maxAckPending handlers at once, never more', async () => {
      const inst = unique('i');
      for (let i = 0; i < 10; i++) await bus.publish(subjects.command(inst), text(String(i)));
      let running = 0;
      let maxRunning = 0;
      let done = 0;
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable: unique('d'), maxAckPending: 3 }, async () => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await delay(20);
        running--;
        done++;
      });
      await waitFor(() => done === 10, 'ten messages');
      assert.ok(maxRunning <= 3, `at most 3 at once, saw ${maxRunning}`);
      assert.ok(maxRunning >= 2, `handlers run concurrently, saw ${maxRunning}`);
    });

    it('redelivers after a thrown handler with deliveryCount 2, keeping order', async () => {
      const inst = unique('i');
      const seen: { body: string; count: number }[] = [];
      await bus.consume(
        { stream: 'commands', filter: subjects.command(inst), durable: unique('d'), maxAckPending: 1, retryDelayMs: 100 },
        async (m) => {
          seen.push({ body: str(m.data), count: m.deliveryCount });
          if (str(m.data) === 'first' && m.deliveryCount === 1) throw new Error('transient failure');
        },
      );
      await bus.publish(subjects.command(inst), text('first'));
      await bus.publish(subjects.command(inst), text('second'));
      await waitFor(() => seen.length === 3, 'three deliveries');
      assert.deepEqual(seen, [
        { body: 'first', count: 1 },
        { body: 'first', count: 2 },
        { body: 'second', count: 1 },
      ]);
    });

    it('shares work between consumers of one durable name (each message once)', async () => {
      const inst = unique('i');
      const durable = unique('d');
      const got: string[] = [];
      const handler = async (m: BusMessage) => {
        await delay(2);
        got.push(str(m.data));
      };
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable, maxAckPending: 4 }, handler);
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable, maxAckPending: 4 }, handler);
      for (let i = 0; i < 20; i++) await bus.publish(subjects.command(inst), text(String(i)), { msgId: `${inst}-${i}` });
      await waitFor(() => got.length >= 20, 'twenty messages');
      await waitFor(async () => (await bus.pending('commands', durable)) === 0, 'nothing pending');
      assert.deepEqual([...got].sort((a, b) => Number(a) - Number(b)), Array.from({ length: 20 }, (_, i) => String(i)));
    });

    it('delivers messages published before the consumer existed', async () => {
      const inst = unique('i');
      for (const body of ['x', 'y', 'z']) await bus.publish(subjects.command(inst), text(body));
      const got: string[] = [];
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable: unique('d'), maxAckPending: 1 }, async (m) => {
        got.push(str(m.data));
      });
      await waitFor(() => got.length === 3, 'three messages');
      assert.deepEqual(got, ['x', 'y', 'z']);
    });

    it('resumes after stop() without loss or repeats', async () => {
      const inst = unique('i');
      const durable = unique('d');
      const opts = { stream: 'commands' as const, filter: subjects.command(inst), durable, maxAckPending: 1 };
      const got: string[] = [];
      const sub = await bus.consume(opts, async (m) => {
        got.push(str(m.data));
      });
      for (const body of ['1', '2', '3']) await bus.publish(subjects.command(inst), text(body));
      await waitFor(() => got.length === 3, 'first three');
      await sub.stop();
      for (const body of ['4', '5', '6']) await bus.publish(subjects.command(inst), text(body));
      assert.equal(await bus.pending('commands', durable), 3);
      await bus.consume(opts, async (m) => {
        got.push(str(m.data));
      });
      await waitFor(() => got.length === 6, 'all six');
      assert.deepEqual(got, ['1', '2', '3', '4', '5', '6']);
    });

    it('leaves no message stuck with a stopped single-owner consumer (maxAckPending > 1)', async () => {
      const inst = unique('i');
      const durable = unique('d');
      // A delivery already on its way when a pull subscription stops is dropped by the client;
      // only a single-owner consumer (the session's commands) can hand it back at once. A shared
      // consumer (the dispatcher's events) gets it again after the ack wait.
      const opts = { stream: 'commands' as const, filter: subjects.command(inst), durable, maxAckPending: 5, ackWaitMs: 30_000, singleOwner: true };
      for (let i = 0; i < 10; i++) await bus.publish(subjects.command(inst), text(String(i)));
      const done = new Set<string>();
      const sub = await bus.consume(opts, async (m) => {
        await delay(30);
        done.add(str(m.data));
      });
      await waitFor(() => done.size >= 2, 'two messages');
      await sub.stop();
      await bus.consume(opts, async (m) => {
        done.add(str(m.data));
      });
      // Well inside the 30 s ack wait: nothing may be stuck with the stopped consumer.
      await waitFor(() => done.size === 10, 'all ten messages', 5000);
    });

    it('keeps events for every durable (limits retention, not a work queue)', async () => {
      const inst = unique('i');
      const a: string[] = [];
      const b: string[] = [];
      await bus.publish(subjects.event(inst, 'message.received'), text('e1'), { msgId: unique('ev') });
      await bus.consume({ stream: 'events', filter: `evt.${inst}.>`, durable: unique('da') }, async (m) => {
        a.push(`${m.subject}:${str(m.data)}`);
      });
      await waitFor(() => a.length === 1, 'first durable');
      await bus.consume({ stream: 'events', filter: `evt.${inst}.>`, durable: unique('db') }, async (m) => {
        b.push(`${m.subject}:${str(m.data)}`);
      });
      await waitFor(() => b.length === 1, 'second durable');
      assert.deepEqual(a, [`evt.${inst}.message.received:e1`]);
      assert.deepEqual(b, a);
    });

    it('counts pending = not yet delivered + delivered but unacknowledged', async () => {
      const inst = unique('i');
      const durable = unique('d');
      assert.equal(await bus.pending('commands', durable), 0, 'unknown durable');
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      let started = 0;
      await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable, maxAckPending: 1 }, async () => {
        started++;
        await gate;
      });
      const storedBefore = await bus.stored('commands'); // what earlier tests left of other instances
      for (let i = 0; i < 3; i++) await bus.publish(subjects.command(inst), text(String(i)));
      await waitFor(() => started === 1, 'first delivery');
      await waitFor(async () => (await bus.pending('commands', durable)) === 3, 'three pending');
      assert.equal(await bus.stored('commands'), storedBefore + 3, 'the work queue holds what is not acknowledged');
      release();
      await waitFor(async () => (await bus.pending('commands', durable)) === 0, 'none pending');
      assert.equal(started, 3);
      await waitFor(async () => (await bus.stored('commands')) === storedBefore, 'acknowledged commands leave the work queue');
    });

    describe('request/reply', () => {
      it('returns the reply of the server', async () => {
        const inst = unique('i');
        await bus.serve(subjects.rpc(inst, 'echo'), async (data) => text(`echo:${str(data)}`));
        const reply = await bus.request(subjects.rpc(inst, 'echo'), text('ping'), 2000);
        assert.equal(str(reply), 'echo:ping');
      });

      it('carries an RpcError back to the requester', async () => {
        const inst = unique('i');
        await bus.serve(subjects.rpc(inst, 'pair'), async () => {
          throw new RpcError(422, 'invalid_phone', 'phone number is not valid');
        });
        await assert.rejects(bus.request(subjects.rpc(inst, 'pair'), text('{}'), 2000), (err: unknown) => {
          assert.ok(err instanceof RpcError);
          assert.equal(err.status, 422);
          assert.equal(err.code, 'invalid_phone');
          assert.equal(err.message, 'phone number is not valid');
          return true;
        });
      });

      it('hides the message of a non-RpcError failure behind a 500', async () => {
        const inst = unique('i');
        await bus.serve(subjects.rpc(inst, 'boom'), async () => {
          throw new Error('secret internals');
        });
        await assert.rejects(bus.request(subjects.rpc(inst, 'boom'), text(''), 2000), (err: unknown) => {
          assert.ok(err instanceof RpcError);
          assert.equal(err.status, 500);
          assert.ok(!err.message.includes('secret'));
          return true;
        });
      });

      it('rejects with 409 session_not_running when nothing serves the subject', async () => {
        await assert.rejects(bus.request(subjects.rpc(unique('i'), 'pair'), text(''), 2000), (err: unknown) => {
          assert.ok(err instanceof RpcError);
          assert.equal(err.status, 409);
          assert.equal(err.code, 'session_not_running');
          return true;
        });
      });

      it('rejects with 504 session_timeout when the server is too slow', async () => {
        const inst = unique('i');
        await bus.serve(subjects.rpc(inst, 'slow'), async () => {
          await delay(500);
          return text('late');
        });
        await assert.rejects(bus.request(subjects.rpc(inst, 'slow'), text(''), 100), (err: unknown) => {
          assert.ok(err instanceof RpcError);
          assert.equal(err.status, 504);
          assert.equal(err.code, 'session_timeout');
          return true;
        });
      });

      it('stops answering after the server subscription stops', async () => {
        const inst = unique('i');
        const sub = await bus.serve(subjects.rpc(inst, 'echo'), async (d) => d);
        await sub.stop();
        await assert.rejects(bus.request(subjects.rpc(inst, 'echo'), text(''), 1000), (err: unknown) => {
          assert.ok(err instanceof RpcError);
          assert.equal(err.status, 409);
          return true;
        });
      });
    });
  });
}
