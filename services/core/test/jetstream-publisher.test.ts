// The publish window on the real NATS server: what each kind of answer (or none) turns into.
// Stored publishes are covered by the bus contract (bus-jetstream.test.ts); here the subjects are
// plain core-NATS subjects, so a test responder can play the part of JetStream.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { JetStreamApiError } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { JetStreamPublisher } from '../src/bus/jetstream-publisher.ts';
import { NATS_URL } from '../../../test/support/services.ts';

describe('JetStreamPublisher', () => {
  let nc: NatsConnection;
  let publisher: JetStreamPublisher;
  const subject = () => `sbtest.publisher.${randomBytes(4).toString('hex')}`;
  const data = new TextEncoder().encode('x');

  beforeEach(async () => {
    nc = await connect({ servers: NATS_URL });
    publisher = new JetStreamPublisher(nc, 300);
  });
  afterEach(async () => {
    publisher.close();
    await nc.close();
  });

  /** A stand-in for the stream: answers every message on `subj` with `answer(msg)`. */
  async function respond(subj: string, answer: (headers: Record<string, string>) => string | undefined) {
    nc.subscribe(subj, {
      callback: (_err, msg) => {
        const headers = Object.fromEntries([...(msg.headers?.keys() ?? [])].map((k) => [k, msg.headers!.get(k)]));
        const reply = answer(headers);
        if (reply !== undefined) msg.respond(reply);
      },
    });
    await nc.flush();
  }

  it('resolves on a PubAck and sends the msgId and headers with the message', async () => {
    const subj = subject();
    const seen: Record<string, string>[] = [];
    await respond(subj, (h) => (seen.push(h), JSON.stringify({ stream: 'S', seq: seen.length })));
    await Promise.all([publisher.publish(subj, data, 'id-1', { traceparent: 'tp' }), publisher.publish(subj, data, 'id-2', undefined)]);
    assert.deepEqual(
      seen.map((h) => [h['Nats-Msg-Id'], h.traceparent]),
      [
        ['id-1', 'tp'],
        ['id-2', undefined],
      ],
    );
  });

  it('rejects with the JetStreamApiError of an error answer', async () => {
    const subj = subject();
    await respond(subj, () => JSON.stringify({ error: { code: 503, err_code: 10077, description: 'maximum messages exceeded' } }));
    const err = await publisher.publish(subj, data, 'id', undefined).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof JetStreamApiError);
    assert.equal(err.status, 503);
    assert.match(err.message, /maximum messages/);
  });

  it('rejects a reply that is not a PubAck', async () => {
    const subj = subject();
    await respond(subj, () => 'not json');
    await assert.rejects(publisher.publish(subj, data, 'id', undefined), /not a PubAck/);
  });

  it('rejects as NoResponders when nothing stores the subject', async () => {
    await assert.rejects(publisher.publish(subject(), data, 'id', undefined), { name: 'NoResponders' });
  });

  it('rejects as TimeoutError when no answer comes, and ignores the late one', async () => {
    const subj = subject();
    const held: (() => void)[] = [];
    nc.subscribe(subj, { callback: (_err, msg) => void held.push(() => msg.respond(JSON.stringify({ stream: "S", seq: 1 }))) });
    await nc.flush();
    await assert.rejects(publisher.publish(subj, data, 'id', undefined), { name: 'TimeoutError' });
    for (const answer of held) answer(); // arrives after the expiry: must not throw or resolve anything
    await nc.flush();
  });

  it('refuses reserved Nats- headers before sending', async () => {
    await assert.rejects(publisher.publish(subject(), data, 'id', { 'Nats-Expected-Stream': 'x' }), /reserved Nats- prefix/);
  });

  it('fails what still waits when closed', async () => {
    const subj = subject();
    nc.subscribe(subj, { callback: () => undefined });
    await nc.flush();
    const pending = publisher.publish(subj, data, 'id', undefined);
    publisher.close();
    await assert.rejects(pending, { name: 'ConnectionError' });
  });
});
