// A send command the server delivered to a subscription that went away before acknowledging it
// (a consumer stopped on a connection drop just as the server sent the next command, or a killed
// process) must not hold the instance's queue for the consumer's ack wait (30 s): the session's
// command consumer has a single owner, so a new start hands such a command out again at once.
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { NatsNames } from '@switchboard/core/bus/jetstream-names';
import { NATS_URL } from '../../../test/support/services.ts';
import type { LocalSessionRuntime } from '../src/local-runtime.ts';
import { enqueueSend, instanceRow, itemStatus, openEnv, until, type Env } from './harness.ts';

describe('session command consumer (NATS JetStream): stranded commands', function () {
  this.timeout(20_000);
  let env: Env;
  let runtime: LocalSessionRuntime;

  before(async () => {
    env = await openEnv({ nats: true });
  });
  after(async () => {
    await runtime?.close();
    await env?.close();
  });

  /** Takes the next command of the instance's durable consumer and never acknowledges it. */
  async function strandNextCommand(instanceId: string): Promise<string> {
    const nc = await connect({ servers: NATS_URL });
    try {
      const consumer = await jetstream(nc).consumers.get(new NatsNames(env.namespace).stream('commands'), `session-${instanceId}`);
      const msg = await consumer.next({ expires: 5000 });
      assert.ok(msg, 'the command reached the stream');
      return (JSON.parse(msg.string()) as { id: string }).id;
    } finally {
      await nc.close(); // gone without ack, nak or "working"
    }
  }

  it('a command delivered to a vanished subscription is sent right after the next start, not after the ack wait', async () => {
    const instanceId = await env.createInstance();
    runtime = env.runtime();
    await runtime.start(instanceId);
    await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
    await runtime.call(instanceId, 'sandbox.scan', { phone: '5511900001111' });
    await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
    await runtime.close(); // the consumer stops; the durable consumer and the credentials stay

    const item = await enqueueSend(env, instanceId, { phone: '5511912345678' });
    assert.equal(await strandNextCommand(instanceId), item.id);

    runtime = env.runtime();
    await runtime.resume(instanceId);
    // Well under the 30 s ack wait the server would otherwise hold the command for.
    await until(async () => (await itemStatus(env.db, item.id)) === 'read', `item ${item.id} sent after the restart`, 8000);
    const ledger = await env.db('sandbox_ledger').where({ instance_id: instanceId }).pluck('messenger_id');
    assert.deepEqual(ledger, [item.messengerId], 'sent exactly once');
  });
});
