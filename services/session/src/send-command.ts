// The send loop's step (DESIGN §1 "Send"): one `cmd.<instanceId>` message names one send item.
// The item is re-read, so duplicates, cancelled and already-handled items are harmless; it is
// marked `sending` before the driver is called and never sent again after that.
import type { Knex } from 'knex';
import {
  parseDestination,
  MediaIntegrityError,
  NOT_CONNECTED,
  Problem,
  SendError,
  type BusMessage,
  type Logger,
  type MessageType,
  type NetworkDriver,
  type OutboundMessage,
  inSpan,
  preferActive,
  SpanKind,
} from '@switchboard/core';
import type { MediaArchive } from './media-archive.ts';
import { retryWhileFailing } from './retry-while-failing.ts';
import { isExpired, markExpired, markFailed, markSending, markSent, markUncertain, payloadOf, type SendItemRow } from './send-items.ts';

export interface SendCommandDeps {
  db: Knex;
  instanceId: string;
  media: MediaArchive;
  log: Logger;
  /** The connected driver, or undefined while the session is not connected. */
  connectedDriver(): NetworkDriver | undefined;
  /** Re-reads settings the driver consults while sending (protectAnnouncementGroups). */
  refreshSettings(): Promise<unknown>;
  /** Called after each commit that recorded events, so the relay publishes them now. */
  eventsRecorded(): void;
  /** The instance was found paused while this session still consumes: a stop it did not hear of. */
  pausedMeanwhile(): void;
}

/** How long recording a send the network took is retried. */
const RECORD_SENT_RETRY_MS = 180_000;

export class NotConnectedError extends Error {
  constructor() {
    super('the session is not connected; the command will be redelivered');
    this.name = 'NotConnectedError';
  }
}

export class InstancePausedError extends Error {
  constructor() {
    super('the instance is paused; the command will be redelivered once it is started again');
    this.name = 'InstancePausedError';
  }
}

export class SendCommandHandler {
  /** The send in progress, so receipts for it wait until its outcome is recorded. */
  private inFlight: Promise<unknown> = Promise.resolve();

  constructor(private readonly deps: SendCommandDeps) {}

  /** Resolves when the send in progress (if any) has recorded its outcome. */
  settled(): Promise<unknown> {
    return this.inFlight;
  }

  /** Bus handler: resolve → ack; throw → redelivered later (only before anything was sent). */
  async handle(msg: BusMessage): Promise<void> {
    const itemId = commandItemId(msg.data);
    if (!itemId) {
      this.deps.log.warn({ subject: msg.subject }, 'send: malformed command dropped');
      return;
    }
    const run = this.process(itemId);
    this.inFlight = run.catch(() => undefined);
    await run;
  }

  private async process(itemId: string): Promise<void> {
    const { db, instanceId } = this.deps;
    const item = (await db('send_items').where({ id: itemId, instance_id: instanceId }).first()) as SendItemRow | undefined;
    if (!item || item.status !== 'queued') return; // cancelled, handled, or a duplicate command
    // "session send" continues the trace of the accepted send (through the bus message's consumer
    // span when it carried one, else from the item's stored trace context).
    const attributes = { 'switchboard.instance_id': instanceId, 'switchboard.message.id': item.id, 'switchboard.message.type': item.type };
    await inSpan('session send', { parent: preferActive(item.trace_context), attributes }, () => this.sendItem(item));
  }

  private async sendItem(item: SendItemRow): Promise<void> {
    if (isExpired(item)) {
      await this.record((trx) => markExpired(trx, item));
      return;
    }
    const driver = this.deps.connectedDriver();
    if (!driver) throw new NotConnectedError();
    await this.deps.refreshSettings();

    let outbound: OutboundMessage;
    try {
      outbound = await this.outboundOf(item);
    } catch (err) {
      // A store that is down or slow is retried (the command is redelivered); only a file that is
      // gone or was altered fails the send.
      if (!isLostMedia(err)) throw err;
      const message = err instanceof Error ? err.message : String(err);
      await this.record((trx) => markFailed(trx, item, { code: 'media_unavailable', message: `The media of this send cannot be read: ${message}` }));
      return;
    }

    if (!(await this.claim(item))) return;
    try {
      await inSpan('network send', { kind: SpanKind.CLIENT }, () => driver.send(outbound));
    } catch (err) {
      await this.recordSendError(item, err);
      return;
    }
    await this.recordSent(item);
  }

  /** The network took the message, so `sent` is the only true outcome: a database that fails to
   *  record it is asked again (for a few minutes) rather than have the item reported uncertain.
   *  Should it stay down longer, the item stays `sending`, and the session's next start reports it
   *  uncertain. */
  private recordSent(item: SendItemRow): Promise<void> {
    return retryWhileFailing(() => this.record((trx) => markSent(trx, item)), {
      forMs: RECORD_SENT_RETRY_MS,
      onRetry: (err, retryInMs) => this.deps.log.warn({ itemId: item.id, err: String(err), retryInMs }, 'send: the network took the message but recording it failed; retrying'),
    });
  }

  /** queued → sending under a row lock, so a cancel or the sweeper cannot slip in between. Nothing
   *  is sent for a paused instance: a disconnect whose stop request never reached this session
   *  (NATS down, a time-out) has already answered, and its pause must hold. An item that expired
   *  while its media was read is expired here, not sent. */
  private async claim(item: SendItemRow): Promise<boolean> {
    const claimed = await this.deps.db.transaction(async (trx) => {
      const row = await trx('send_items')
        .join('instances', 'instances.id', 'send_items.instance_id')
        .where('send_items.id', item.id)
        .forUpdate('send_items')
        .first('send_items.status', 'instances.paused');
      if (!row || row.status !== 'queued') return false;
      if (row.paused) return 'paused';
      if (!isExpired(item)) return markSending(trx, item);
      return (await markExpired(trx, item)) ? 'expired' : false;
    });
    if (claimed === 'expired') this.deps.eventsRecorded();
    if (claimed !== 'paused') return claimed === true;
    this.deps.pausedMeanwhile();
    throw new InstancePausedError();
  }

  private async recordSendError(item: SendItemRow, err: unknown): Promise<void> {
    if (err instanceof SendError && err.definite && err.code === NOT_CONNECTED) {
      // The connection dropped just before the send and nothing left: back to the queue.
      await this.deps.db('send_items').where({ id: item.id, status: 'sending' }).update({ status: 'queued', updated_at: this.deps.db.fn.now() });
      throw new NotConnectedError();
    }
    if (err instanceof SendError && err.definite) {
      await this.record((trx) => markFailed(trx, item, { code: err.code, message: err.message }));
    } else {
      // It may have left: report uncertain and never resend automatically.
      const code = err instanceof SendError ? err.code : 'send_error';
      const message = err instanceof Error ? err.message : String(err);
      if (!(err instanceof SendError)) this.deps.log.warn({ itemId: item.id, err: message }, 'send: driver failed unexpectedly');
      await this.record((trx) => markUncertain(trx, item, { code, message }));
    }
  }

  private async outboundOf(item: SendItemRow): Promise<OutboundMessage> {
    const payload = payloadOf(item);
    return {
      messengerId: item.messenger_id,
      to: parseDestination(item.phone),
      type: item.type as MessageType,
      text: payload.text,
      caption: payload.caption,
      fileName: payload.fileName,
      mimetype: payload.mimetype,
      ptt: payload.ptt,
      seconds: payload.seconds,
      waveform: payload.waveform ? Buffer.from(payload.waveform, 'base64') : undefined,
      media: payload.mediaId ? await this.deps.media.read(payload.mediaId) : undefined,
    };
  }

  private async record(write: (trx: Knex.Transaction) => Promise<unknown>): Promise<void> {
    await this.deps.db.transaction(write);
    this.deps.eventsRecorded();
  }
}

/** The send's file is gone (retention, a deleted blob) or no longer what was stored. */
function isLostMedia(err: unknown): boolean {
  return (err instanceof Problem && err.status === 404) || err instanceof MediaIntegrityError;
}

function commandItemId(data: Uint8Array): string | undefined {
  try {
    const parsed = JSON.parse(Buffer.from(data).toString('utf8')) as { id?: unknown };
    return typeof parsed.id === 'string' && parsed.id.length <= 40 ? parsed.id : undefined;
  } catch {
    return undefined;
  }
}
