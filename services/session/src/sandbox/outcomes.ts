// The sandbox's "test card numbers" (DESIGN §6): the last four digits of a destination select
// what the simulated network does with a send.
import type { DeliveryStatus, Destination } from '@switchboard/core';

export type SendOutcome =
  | { kind: 'rejected' } // 0000: the network refuses it (message.failed)
  | { kind: 'connection_drop' } // 0001: the connection drops mid-send (message.uncertain)
  | { kind: 'delivered_only' } // 0002: delivered, never read
  | { kind: 'announcement_group' } // 0003 on a group: announcement-only group, we are not admin (refused only with protectAnnouncementGroups)
  | { kind: 'not_on_network' } // 0004: no such account (message.failed, not_on_network)
  | { kind: 'normal' };

/** Digits that identify a destination, whatever its form. */
export function destinationDigits(to: Destination): string {
  if (to.kind === 'phone') return to.phone;
  if (to.kind === 'lid') return to.lid;
  return to.groupId.replace(/\D/g, '');
}

export function outcomeFor(to: Destination): SendOutcome {
  switch (destinationDigits(to).slice(-4)) {
    case '0000':
      return { kind: 'rejected' };
    case '0001':
      return { kind: 'connection_drop' };
    case '0002':
      return { kind: 'delivered_only' };
    case '0003':
      return to.kind === 'group' ? { kind: 'announcement_group' } : { kind: 'normal' };
    case '0004':
      return { kind: 'not_on_network' };
    default:
      return { kind: 'normal' };
  }
}

/** Receipts the network sends after accepting a message, in order. */
export function receiptsFor(outcome: SendOutcome, voiceNote: boolean): DeliveryStatus[] {
  if (outcome.kind === 'delivered_only') return ['sent', 'delivered'];
  return voiceNote ? ['sent', 'delivered', 'read', 'played'] : ['sent', 'delivered', 'read'];
}

/** The chat JID of a destination, as the network writes it. */
export function destinationJid(to: Destination): string {
  if (to.kind === 'phone') return `${to.phone}@s.whatsapp.net`;
  if (to.kind === 'lid') return `${to.lid}@lid`;
  return `${to.groupId}@g.us`;
}
