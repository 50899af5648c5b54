// Baileys' `getMessage`: when a recipient's device fails to decrypt one of our messages it asks for
// a retry, and Baileys needs the original content to encrypt it again. We answer from our own
// records: the exact content of recent sends (kept in memory, media included), else the text of
// the send item in the database (a media send after a restart cannot be rebuilt: its upload keys
// are gone, so Baileys is told we do not have it).
import type { Knex } from 'knex';
import { proto, type WAMessageKey } from '@whiskeysockets/baileys';

export class SentMessages {
  private readonly recent = new Map<string, proto.IMessage>();

  constructor(
    private readonly db: Knex,
    private readonly instanceId: string,
    private readonly capacity = 1_000,
  ) {}

  remember(messengerId: string, message: proto.IMessage): void {
    this.recent.delete(messengerId);
    this.recent.set(messengerId, message);
    if (this.recent.size > this.capacity) this.recent.delete(this.recent.keys().next().value as string);
  }

  async get(key: WAMessageKey): Promise<proto.IMessage | undefined> {
    if (!key.id) return undefined;
    const cached = this.recent.get(key.id);
    if (cached) return cached;
    const row = await this.db('send_items')
      .where({ instance_id: this.instanceId, messenger_id: key.id })
      .first('type', 'payload');
    if (!row || row.type !== 'text') return undefined;
    const payload = typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload;
    if (typeof payload?.text !== 'string') return undefined;
    return proto.Message.create({ extendedTextMessage: { text: payload.text } });
  }
}
