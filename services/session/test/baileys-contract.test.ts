// The Baileys driver against the shared NetworkDriver contract, with the stand-in socket playing
// WhatsApp's server side (QR for new devices, login for paired ones, receipts for sends).
import { randomBytes } from 'node:crypto';
import { proto, type WAMessage } from '@whiskeysockets/baileys';
import { createLogger, type Db } from '@switchboard/core';
import { openTestDatabase } from '../../../test/support/services.ts';
import { createBaileysDriver } from '../src/drivers/baileys/index.ts';
import { StandInNetwork } from '../src/drivers/baileys/stand-in-socket.ts';
import { driverContract } from './driver-contract.ts';

const log = createLogger({ level: 'silent' });
let db: Db;
let drop: () => Promise<void>;

before(async () => {
  ({ db, drop } = await openTestDatabase());
});
after(async () => drop?.());

driverContract('baileys (stand-in socket)', async () => {
  const network = new StandInNetwork(log, { auto: true, receiptDelayMs: 5 });
  const factory = createBaileysDriver({ db, log, socketFactory: network.factory, backoff: { baseMs: 5, maxMs: 20, jitter: 0.2 } });
  return {
    create: (ctx) => factory(ctx),
    scan: async (_driver, phone) => network.current.completePairing(phone),
    deliverText: async (_driver, fromPhone, text, name) => {
      const id = `3A${randomBytes(9).toString('hex').toUpperCase()}`;
      const msg = proto.WebMessageInfo.fromObject({
        key: { remoteJid: `${fromPhone}@s.whatsapp.net`, fromMe: false, id },
        message: { conversation: text },
        pushName: name,
        messageTimestamp: Math.floor(Date.now() / 1000),
      }) as WAMessage;
      network.current.emit('messages.upsert', { messages: [msg], type: 'notify' });
      return id;
    },
    okDestination: '5511912345678',
    close: async () => undefined,
  };
});
