// Which URL an event goes to, or why it goes nowhere (DESIGN §5 "Events": routing and filters).
// Pure: the dispatcher's intake calls it once per event with the instance's configuration at that
// moment, and the decision is stored in the delivery row; a manual retry (deliveries.ts) routes
// the event again with the configuration of its own moment.
import type { WebhookConfig, WebhookDestination } from './deliveries.ts';
import type { EventEnvelope } from './events.ts';
import type { SettingName } from './network.ts';

export type RouteDecision = { status: 'pending'; url: string } | { status: 'filtered' } | { status: 'no_destination' };

export type WebhookSettings = Partial<Record<SettingName, boolean>>;

interface Route {
  /** The destination field that serves this event when set; otherwise the general `url`. */
  destination: WebhookDestination | null;
  /** The `ignore<Kind>` setting that suppresses this route. */
  ignoredBy: SettingName | null;
}

/** Which destination field and which ignore setting belong to an event. */
function routeOf(envelope: Pick<EventEnvelope, 'type' | 'data'>): Route {
  switch (envelope.type) {
    case 'message.received':
      return { destination: 'received', ignoredBy: 'ignoreReceived' };
    case 'message.sent':
    case 'message.failed':
    case 'message.uncertain':
      return { destination: 'delivery', ignoredBy: 'ignoreDelivery' };
    case 'message.status':
      return { destination: 'status', ignoredBy: 'ignoreStatus' };
    case 'chat.presence':
      return { destination: 'presence', ignoredBy: 'ignorePresence' };
    case 'connection.update': {
      const data = envelope.data ?? {};
      if (data.state === 'connected') return { destination: 'connected', ignoredBy: 'ignoreConnected' };
      if (data.previousState === 'connected') return { destination: 'disconnected', ignoredBy: 'ignoreDisconnected' };
      // Other transitions (starting → awaiting_scan, …) have no route of their own.
      return { destination: null, ignoredBy: null };
    }
    default:
      // webhook.test and anything without a route of its own: the general URL only.
      return { destination: null, ignoredBy: null };
  }
}

/** The ignore setting for each received message type; stickers have none. */
const TYPE_FILTERS: Record<string, SettingName> = {
  text: 'ignoreText',
  image: 'ignoreImage',
  video: 'ignoreVideo',
  audio: 'ignoreAudio',
  document: 'ignoreDocument',
};

/** A received message is a group message when its chat is a group JID. */
function isGroupMessage(data: Record<string, unknown>): boolean {
  if (typeof data.isGroup === 'boolean') return data.isGroup;
  return typeof data.from === 'string' && data.from.endsWith('@g.us');
}

/** The filters that only apply to message.received (spec "Boolean settings"). */
function receivedIsFiltered(data: Record<string, unknown>, settings: WebhookSettings): boolean {
  if (data.fromMe === true && !settings.notifyFromMe) return true;
  const group = isGroupMessage(data);
  if (group && settings.ignoreGroups) return true;
  if (!group && settings.ignorePrivate) return true;
  const typeFilter = typeof data.type === 'string' ? TYPE_FILTERS[data.type] : undefined;
  return typeFilter !== undefined && settings[typeFilter] === true;
}

/**
 * Filters are checked before destinations: an event the settings suppress is `filtered` even when
 * no URL is configured, so the event list explains why it was not sent.
 */
export function routeEvent(envelope: Pick<EventEnvelope, 'type' | 'data'>, webhook: WebhookConfig, settings: WebhookSettings): RouteDecision {
  const route = routeOf(envelope);
  if (route.ignoredBy && settings[route.ignoredBy]) return { status: 'filtered' };
  if (envelope.type === 'message.received' && receivedIsFiltered(envelope.data ?? {}, settings)) return { status: 'filtered' };
  const specific = route.destination ? nonEmpty(webhook[route.destination]) : undefined;
  const url = specific ?? nonEmpty(webhook.url);
  return url ? { status: 'pending', url } : { status: 'no_destination' };
}

function nonEmpty(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
}
