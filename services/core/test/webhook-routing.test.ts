// Routing and filters of DESIGN §5 "Events", one table row per rule.
import assert from 'node:assert/strict';
import type { WebhookConfig } from '../src/deliveries.ts';
import { routeEvent, type RouteDecision, type WebhookSettings } from '../src/webhook-routing.ts';

const ALL_URLS: WebhookConfig = {
  url: 'https://general.example.com/h',
  received: 'https://received.example.com/h',
  delivery: 'https://delivery.example.com/h',
  status: 'https://status.example.com/h',
  connected: 'https://connected.example.com/h',
  disconnected: 'https://disconnected.example.com/h',
  presence: 'https://presence.example.com/h',
  format: 'native',
};
const GENERAL_ONLY: WebhookConfig = { url: 'https://general.example.com/h', received: '', delivery: '', status: '', connected: '', disconnected: '', presence: '' };
const NOTHING: WebhookConfig = { url: '', received: '', delivery: '', status: '', connected: '', disconnected: '', presence: '' };

const privateText = { messageId: 'm1', from: '5511999990000@s.whatsapp.net', phone: '5511999990000', fromMe: false, fromApi: false, type: 'text', text: 'hi' };
const groupText = { ...privateText, from: '120363000000000000@g.us', participant: '5511999990000@s.whatsapp.net' };
const received = (data: Record<string, unknown>) => ({ type: 'message.received' as const, data });
const conn = (state: string, previousState: string) => ({ type: 'connection.update' as const, data: { state, previousState, phone: null, reason: null } });

const pending = (url: string): RouteDecision => ({ status: 'pending', url });
const FILTERED: RouteDecision = { status: 'filtered' };
const NO_DESTINATION: RouteDecision = { status: 'no_destination' };

interface Case {
  name: string;
  event: { type: any; data: Record<string, unknown> };
  webhook?: WebhookConfig;
  settings?: WebhookSettings;
  expected: RouteDecision;
}

const cases: Case[] = [
  // Destinations: each event type to its own URL…
  { name: 'message.received → received', event: received(privateText), expected: pending(ALL_URLS.received!) },
  { name: 'message.sent → delivery', event: { type: 'message.sent', data: {} }, expected: pending(ALL_URLS.delivery!) },
  { name: 'message.failed → delivery', event: { type: 'message.failed', data: {} }, expected: pending(ALL_URLS.delivery!) },
  { name: 'message.uncertain → delivery', event: { type: 'message.uncertain', data: {} }, expected: pending(ALL_URLS.delivery!) },
  { name: 'message.status → status', event: { type: 'message.status', data: { status: 'read' } }, expected: pending(ALL_URLS.status!) },
  { name: 'connection.update to connected → connected', event: conn('connected', 'starting'), expected: pending(ALL_URLS.connected!) },
  { name: 'connection.update leaving connected → disconnected', event: conn('reconnecting', 'connected'), expected: pending(ALL_URLS.disconnected!) },
  { name: 'connection.update connected → logged_out → disconnected', event: conn('logged_out', 'connected'), expected: pending(ALL_URLS.disconnected!) },
  { name: 'other connection.update → general url', event: conn('awaiting_scan', 'starting'), expected: pending(ALL_URLS.url!) },
  { name: 'chat.presence → presence', event: { type: 'chat.presence', data: { presence: 'composing' } }, expected: pending(ALL_URLS.presence!) },
  { name: 'webhook.test → general url only', event: { type: 'webhook.test', data: {} }, expected: pending(ALL_URLS.url!) },
  // …or to the general URL when its own is empty…
  { name: 'received falls back to url', event: received(privateText), webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'delivery falls back to url', event: { type: 'message.sent', data: {} }, webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'status falls back to url', event: { type: 'message.status', data: {} }, webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'connected falls back to url', event: conn('connected', 'starting'), webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'disconnected falls back to url', event: conn('reconnecting', 'connected'), webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'presence falls back to url', event: { type: 'chat.presence', data: {} }, webhook: GENERAL_ONLY, expected: pending(GENERAL_ONLY.url!) },
  { name: 'a specific URL alone still serves its event', event: { type: 'message.status', data: {} }, webhook: { ...NOTHING, status: 'https://s.example.com/' }, expected: pending('https://s.example.com/') },
  { name: 'webhook.test ignores specific URLs', event: { type: 'webhook.test', data: {} }, webhook: { ...NOTHING, received: 'https://r.example.com/' }, expected: NO_DESTINATION },
  // …or nowhere.
  { name: 'no URL at all → no_destination', event: received(privateText), webhook: NOTHING, expected: NO_DESTINATION },
  { name: 'empty configuration → no_destination', event: { type: 'message.sent', data: {} }, webhook: {}, expected: NO_DESTINATION },
  // ignore<Kind> suppresses its route, whichever URL would serve it.
  { name: 'ignoreReceived', event: received(privateText), settings: { ignoreReceived: true }, expected: FILTERED },
  { name: 'ignoreReceived with only a general url', event: received(privateText), webhook: GENERAL_ONLY, settings: { ignoreReceived: true }, expected: FILTERED },
  { name: 'ignoreDelivery on sent', event: { type: 'message.sent', data: {} }, settings: { ignoreDelivery: true }, expected: FILTERED },
  { name: 'ignoreDelivery on failed', event: { type: 'message.failed', data: {} }, settings: { ignoreDelivery: true }, expected: FILTERED },
  { name: 'ignoreDelivery on uncertain', event: { type: 'message.uncertain', data: {} }, settings: { ignoreDelivery: true }, expected: FILTERED },
  { name: 'ignoreStatus', event: { type: 'message.status', data: {} }, settings: { ignoreStatus: true }, expected: FILTERED },
  { name: 'ignorePresence', event: { type: 'chat.presence', data: {} }, settings: { ignorePresence: true }, expected: FILTERED },
  { name: 'ignoreConnected', event: conn('connected', 'reconnecting'), settings: { ignoreConnected: true }, expected: FILTERED },
  { name: 'ignoreConnected leaves disconnects alone', event: conn('reconnecting', 'connected'), settings: { ignoreConnected: true }, expected: pending(ALL_URLS.disconnected!) },
  { name: 'ignoreDisconnected', event: conn('reconnecting', 'connected'), settings: { ignoreDisconnected: true }, expected: FILTERED },
  { name: 'ignoreDisconnected leaves connects alone', event: conn('connected', 'starting'), settings: { ignoreDisconnected: true }, expected: pending(ALL_URLS.connected!) },
  { name: 'a filter of another route does not apply', event: { type: 'message.status', data: {} }, settings: { ignoreReceived: true, ignoreDelivery: true }, expected: pending(ALL_URLS.status!) },
  { name: 'filters are checked before destinations', event: { type: 'message.status', data: {} }, webhook: NOTHING, settings: { ignoreStatus: true }, expected: FILTERED },
  // Received-only filters.
  { name: 'ignoreGroups filters a group message', event: received(groupText), settings: { ignoreGroups: true }, expected: FILTERED },
  { name: 'ignoreGroups keeps a private message', event: received(privateText), settings: { ignoreGroups: true }, expected: pending(ALL_URLS.received!) },
  { name: 'ignorePrivate filters a private message', event: received(privateText), settings: { ignorePrivate: true }, expected: FILTERED },
  { name: 'ignorePrivate keeps a group message', event: received(groupText), settings: { ignorePrivate: true }, expected: pending(ALL_URLS.received!) },
  { name: 'ignoreText', event: received(privateText), settings: { ignoreText: true }, expected: FILTERED },
  { name: 'ignoreImage', event: received({ ...privateText, type: 'image' }), settings: { ignoreImage: true }, expected: FILTERED },
  { name: 'ignoreVideo', event: received({ ...privateText, type: 'video' }), settings: { ignoreVideo: true }, expected: FILTERED },
  { name: 'ignoreAudio', event: received({ ...privateText, type: 'audio' }), settings: { ignoreAudio: true }, expected: FILTERED },
  { name: 'ignoreDocument', event: received({ ...privateText, type: 'document' }), settings: { ignoreDocument: true }, expected: FILTERED },
  { name: 'ignoreImage keeps text', event: received(privateText), settings: { ignoreImage: true, ignoreVideo: true, ignoreAudio: true, ignoreDocument: true }, expected: pending(ALL_URLS.received!) },
  { name: 'stickers have no type filter', event: received({ ...privateText, type: 'sticker' }), settings: { ignoreText: true, ignoreImage: true }, expected: pending(ALL_URLS.received!) },
  { name: 'type filters do not apply to other events', event: { type: 'message.sent', data: { type: 'text' } }, settings: { ignoreText: true, ignoreGroups: true, ignorePrivate: true }, expected: pending(ALL_URLS.delivery!) },
  // Own messages only with notifyFromMe.
  { name: 'fromMe without notifyFromMe', event: received({ ...privateText, fromMe: true }), expected: FILTERED },
  { name: 'API echo (fromMe, fromApi) without notifyFromMe', event: received({ ...privateText, fromMe: true, fromApi: true }), expected: FILTERED },
  { name: 'fromMe with notifyFromMe', event: received({ ...privateText, fromMe: true }), settings: { notifyFromMe: true }, expected: pending(ALL_URLS.received!) },
  { name: 'notifyFromMe does not bypass other filters', event: received({ ...privateText, fromMe: true }), settings: { notifyFromMe: true, ignoreText: true }, expected: FILTERED },
  { name: 'settings that are not filters change nothing', event: received(privateText), settings: { autoReadMessages: true, autoRejectCalls: true, disableOfflineQueue: true }, expected: pending(ALL_URLS.received!) },
];

describe('routeEvent', () => {
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(routeEvent(c.event, c.webhook ?? ALL_URLS, c.settings ?? {}), c.expected);
    });
  }
});
