// The in-process bus against the shared contract, plus what only it has (a memory bound).
import assert from 'node:assert/strict';
import { createLogger } from '../src/logger.ts';
import { MemoryBus } from '../src/bus/memory.ts';
import { defineBusContract, waitFor } from './bus-contract.ts';

const log = createLogger({ level: 'silent' });

defineBusContract('memory', async () => new MemoryBus({ log }));

describe('MemoryBus', () => {
  it('forgets a msgId after the 2-minute duplicate window', async () => {
    let now = 1_000_000;
    const bus = new MemoryBus({ log, now: () => now });
    const got: string[] = [];
    await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'd' }, async (m) => {
      got.push(new TextDecoder().decode(m.data));
    });
    await bus.publish('evt.i.x', new TextEncoder().encode('1'), { msgId: 'same' });
    now += 119_000;
    await bus.publish('evt.i.x', new TextEncoder().encode('2'), { msgId: 'same' });
    now += 2_000;
    await bus.publish('evt.i.x', new TextEncoder().encode('3'), { msgId: 'same' });
    await waitFor(() => got.length === 2, 'two events');
    assert.deepEqual(got, ['1', '3']);
    await bus.close();
  });

  it('lets the event loop run between the messages of a backlog (timers and I/O are not starved)', async () => {
    const bus = new MemoryBus({ log });
    for (let i = 0; i < 50; i++) await bus.publish('cmd.inst-a', new TextEncoder().encode(String(i)));
    let handled = 0;
    await bus.consume({ stream: 'commands', filter: 'cmd.inst-a', durable: 'd', maxAckPending: 1 }, async () => {
      // Each message takes 0.5 ms of CPU, so the backlog takes 25 ms: far past the timer's 1 ms
      // however fast the machine turns its event loop.
      const until = performance.now() + 0.5;
      while (performance.now() < until);
      handled++;
    });
    // A timer set now fires after a few messages, not after the whole backlog.
    const handledWhenTheTimerFired = await new Promise<number>((resolve) => setTimeout(() => resolve(handled), 0));
    assert.ok(handledWhenTheTimerFired < 50, `the timer waited for ${handledWhenTheTimerFired} messages`);
    await waitFor(() => handled === 50, 'the whole backlog');
    await bus.close();
  });

  it('keeps, beyond maxEventMessages, every event a durable consumer has not taken yet', async () => {
    const bus = new MemoryBus({ log, maxEventMessages: 2 });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const got: string[] = [];
    await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'dispatcher', maxAckPending: 1 }, async (m) => {
      got.push(new TextDecoder().decode(m.data));
      await held; // a dispatcher far behind
    });
    for (let i = 1; i <= 8; i++) await bus.publish('evt.i.x', new TextEncoder().encode(String(i)));
    release();
    await waitFor(() => got.length === 8, 'every event');
    assert.deepEqual(got, ['1', '2', '3', '4', '5', '6', '7', '8']);
    await bus.close();
  });

  it('drops the oldest events beyond maxEventMessages', async () => {
    const bus = new MemoryBus({ log, maxEventMessages: 2 });
    for (const body of ['1', '2', '3']) await bus.publish('evt.i.x', new TextEncoder().encode(body));
    const got: string[] = [];
    await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'd' }, async (m) => {
      got.push(new TextDecoder().decode(m.data));
    });
    await waitFor(() => got.length === 2, 'two events');
    assert.deepEqual(got, ['2', '3']);
    await bus.close();
  });
});
