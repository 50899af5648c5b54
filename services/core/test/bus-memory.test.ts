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
