// WhatsApp addresses (JIDs) ↔ our phone/LID/group forms. A phone number is only ever read from a
// phone-number JID (`<digits>@s.whatsapp.net`), never derived from a LID.
import { isJidGroup, isLidUser, isPnUser, jidDecode, jidNormalizedUser } from '@whiskeysockets/baileys';
import type { Destination } from '@switchboard/core';

/** The JID a send goes to. */
export function destinationJid(to: Destination): string {
  switch (to.kind) {
    case 'phone':
      return `${to.phone}@s.whatsapp.net`;
    case 'group':
      return `${to.groupId}@g.us`;
    case 'lid':
      return `${to.lid}@lid`;
  }
}

/** The digits of a phone-number JID (device suffix dropped); null for LIDs, groups and others. */
export function phoneOf(jid: string | null | undefined): string | null {
  if (!jid || !isPnUser(jid)) return null;
  return jidDecode(jid)?.user ?? null;
}

/** A person's JID (phone number or LID), not a group, broadcast or newsletter. */
export function isPersonJid(jid: string): boolean {
  return !!(isPnUser(jid) || isLidUser(jid));
}

/** Normalised user JID (device and agent dropped), or null. */
export function normalised(jid: string | null | undefined): string | null {
  if (!jid) return null;
  return jidNormalizedUser(jid) || null;
}

/** Of a JID and its alternative (the other addressing form), the phone-number side. */
export function pnSide(jid: string | null | undefined, alt: string | null | undefined): string | null {
  return phoneOf(jid) ?? phoneOf(alt);
}

/** Of a JID and its alternative, the LID side (normalised), or null. */
export function lidSide(jid: string | null | undefined, alt: string | null | undefined): string | null {
  if (jid && isLidUser(jid)) return normalised(jid);
  if (alt && isLidUser(alt)) return normalised(alt);
  return null;
}

export function isGroupJid(jid: string | null | undefined): boolean {
  return !!jid && !!isJidGroup(jid);
}
