// Request and response schemas. The same zod objects validate requests and generate
// GET /openapi.json, so the document cannot drift from what the server enforces.
import { z } from 'zod';
import { RESOURCE_ID, SETTING_NAMES, WEBHOOK_DESTINATIONS, type WebhookDestination } from '@switchboard/core';

/** 2–70 characters with at least one visible one: a name of blanks names nothing. Invisible are
 *  white space, control and format characters (direction marks, soft hyphens, joiners), the
 *  characters Unicode says to render as nothing (variation selectors, fillers, tags) and the
 *  blank braille pattern. */
const VISIBLE = /[^\s\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2800]/u;
export const NAME = z.string().min(2).max(70).refine((s) => VISIBLE.test(s), 'must contain a visible character');
const ID = z.string().min(1).max(64);
/** A date, or a date and time with an optional offset; routes/admin.ts reads its parts. */
export const DATE_TIME = /^(?<date>\d{4}-\d{2}-\d{2})(?:T(?<h>\d{2}):(?<m>\d{2})(?::(?<s>\d{2})(?:\.\d{1,9})?)?(?:Z|(?<sign>[+-])(?<oh>\d{2}):?(?<om>\d{2}))?)?$/;
const DAY = z.string().regex(DATE_TIME, 'must be a date such as 2026-01-31');
/** Project ids are Kubernetes names (DESIGN §5 "Ids"). */
const PROJECT_ID = z.string().max(40).regex(RESOURCE_ID, 'must be lowercase letters, digits and dashes, at most 40 characters');

export const ProjectBody = z.object({ name: NAME, projectId: PROJECT_ID.nullable().optional() });
export const InstanceCreateBody = z.object({ name: NAME, projectId: PROJECT_ID.nullable().optional() });
export const InstancePatchBody = z.object({ name: NAME.optional(), projectId: PROJECT_ID.nullable().optional() });
export const AppCreateBody = z.object({ name: NAME, projectId: PROJECT_ID.nullable().optional() });
export const PairingBody = z.object({ phone: z.string().regex(/^\d{8,15}$/, 'digits only: country code, area code and number, no signs') });

const settingsShape = Object.fromEntries(SETTING_NAMES.map((n) => [n, z.boolean().optional()])) as Record<(typeof SETTING_NAMES)[number], z.ZodOptional<z.ZodBoolean>>;
export const SettingsBody = z.strictObject(settingsShape);
export const Settings = z.object(Object.fromEntries(SETTING_NAMES.map((n) => [n, z.boolean()])));

const destinationShape = Object.fromEntries(WEBHOOK_DESTINATIONS.map((d) => [d, z.string().max(2048).optional()])) as Record<WebhookDestination, z.ZodOptional<z.ZodString>>;
// The specification's schema lists `legacy` as a format, and its prose accepts only `native`:
// `legacy` is a known option we do not support (422), anything else is invalid input (400).
export const WEBHOOK_FORMATS = ['native', 'legacy'] as const;
// `secret` is what a save answers with, so a client may send that answer back as its next save;
// the service creates secrets, so a different one is refused (routes/webhooks.ts).
export const WebhookBody = z.strictObject({
  ...destinationShape,
  format: z.enum(WEBHOOK_FORMATS).optional(),
  settings: SettingsBody.optional(),
  secret: z.string().max(256).optional().describe('Ignored when it is the current signing secret (a saved configuration sent back as it was answered); any other value is refused: the service creates secrets (POST …/webhook/secret makes a new one).'),
});
/** The saved configuration: every destination, the format and the settings (the instance's `webhook`). */
export const WebhookConfig = z.object({
  ...(Object.fromEntries(WEBHOOK_DESTINATIONS.map((d) => [d, z.string()])) as Record<WebhookDestination, z.ZodString>),
  format: z.literal('native'),
  settings: Settings,
});

export const MESSAGE_TYPES = ['text', 'image', 'audio', 'video', 'document', 'sticker'] as const;
/** DESIGN's phone forms, each with a length bound (the column holds 64 characters; real group
 *  ids and LIDs are under 30 digits). An unbounded form was a database error, not a 400. */
const PHONE_FORMS = ['\\d{8,15}', '\\d{1,30}-group', '\\d{1,30}(-\\d{1,15})?@g\\.us', '\\d{1,30}@lid'];
/** One pattern, so the OpenAPI document states exactly what the server enforces. */
const PHONE = new RegExp(`^(?:${PHONE_FORMS.join('|')})$`);
/** The optional Idempotency-Key header of a send: the same in the route's check and the OpenAPI document. */
export const IdempotencyKey = z.string().min(1).max(128).regex(/^[\x20-\x7e]+$/, 'printable ASCII');

export const SendBody = z
  .object({
    phone: z.string().regex(PHONE, 'must be phone digits with country code (8-15 digits), <digits>-group, <digits>@g.us or <digits>@lid'),
    type: z.enum(MESSAGE_TYPES),
    text: z.string().max(16000).nullish().describe('The message of type text (required there). Media types take their words in caption; a non-empty text there is refused.'),
    base64: z.string().nullish().describe('The file of a media type, standard base64 without a data: prefix; at most 32 MiB decoded.'),
    mimetype: z.string().max(255).nullish().describe('The file\'s type, required for media types: image/*, video/*, audio/* for those types; any for a document; for a sticker image/webp, or image/png, image/jpeg, image/gif, image/bmp or image/tiff, which are converted to a 512×512 WebP (422 when the file cannot be decoded).'),
    caption: z.string().max(16000).nullish().describe('Words shown with an image, video or document. Refused when non-empty on audio and on text; a sticker\'s is kept with the item but shown by no recipient.'),
    fileName: z.string().max(255).nullish().describe('Shown by recipients of a document; an empty string is none.'),
    ptt: z.boolean().nullish().describe('On audio: true converts it to an Ogg Opus voice note (422 when the audio cannot be decoded). true on other types is 422.'),
  })
  .superRefine((b, ctx) => {
    // An empty string or null is no content: clients that send every field blank, or every unset
    // field as null (as many JSON serialisers do), are not refused for it.
    if (b.type === 'text') {
      if (!b.text) ctx.addIssue({ code: 'custom', path: ['text'], message: 'required for type text' });
      // A file or a caption on a text send would be dropped unsent: the client meant a media type.
      for (const field of ['base64', 'mimetype'] as const) {
        if (b[field]) ctx.addIssue({ code: 'custom', path: [field], message: 'not allowed for type text (a file is sent with a media type)' });
      }
      if (b.caption) ctx.addIssue({ code: 'custom', path: ['caption'], message: 'not allowed for type text (a caption goes with a media type)' });
      return;
    }
    if (!b.base64) ctx.addIssue({ code: 'custom', path: ['base64'], message: `required for type ${b.type}` });
    if (!b.mimetype) ctx.addIssue({ code: 'custom', path: ['mimetype'], message: `required for type ${b.type}` });
    // Likewise dropped: `text` of a media message (its words go in caption). A caption is optional
    // on every media type but audio (the specification's one exception), though a sticker shows none.
    if (b.text) ctx.addIssue({ code: 'custom', path: ['text'], message: `not allowed for type ${b.type} (a media message's words go in caption)` });
    if (b.type === 'audio' && b.caption) ctx.addIssue({ code: 'custom', path: ['caption'], message: 'not allowed for audio' });
  })
  .transform(withoutEmptyFields);
export type SendRequest = z.output<typeof SendBody>;

/** A null or an empty string is no content (decisions.md "Send validation"): dropped once, here,
 *  so the stored item, its file's record and the idempotency content all see the same send. */
function withoutEmptyFields<T extends object>(body: T): { [K in keyof T]: Exclude<T[K], null> } {
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== null && value !== '')) as { [K in keyof T]: Exclude<T[K], null> };
}

export const StatsQuery = z.object({
  from: DAY.optional(),
  to: DAY.optional(),
  projectId: ID.optional(),
  instanceId: ID.optional(),
});

// Response records (DESIGN §5 "Records"), for the OpenAPI document.
const timestamps = { createdAt: z.string(), updatedAt: z.string() };
export const ProjectRecord = z.object({ id: z.string(), name: z.string(), ...timestamps });
export const InstanceRecord = z.object({
  id: z.string(),
  name: z.string(),
  projectId: z.string().nullable(),
  state: z.enum(['stopped', 'starting', 'awaiting_scan', 'connected', 'reconnecting', 'logged_out']),
  connected: z.boolean(),
  qrCode: z.string().nullable(),
  qrImage: z.string().nullable(),
  phone: z.string().nullable(),
  paused: z.boolean(),
  settings: Settings,
  webhook: WebhookConfig,
  ...timestamps,
});
export const AppRecord = z.object({ appId: z.string(), name: z.string(), projectId: z.string().nullable(), keyPrefix: z.string(), createdAt: z.string() });
export const SendItemRecord = z.object({
  id: z.string(),
  messengerId: z.string(),
  phone: z.string(),
  type: z.string(),
  status: z.string(),
  createdAt: z.string(),
  updatedAt: z.string(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
});
export const Accepted = z.object({ id: z.string(), messengerId: z.string(), status: z.string(), reused: z.boolean() });
export const IncomingRecord = z.object({
  id: z.string(),
  messageId: z.string(),
  from: z.string().nullable(),
  phone: z.string().nullable(),
  chatLid: z.string().nullable(),
  participant: z.string().nullable(),
  fromMe: z.boolean(),
  fromApi: z.boolean(),
  name: z.string().nullable(),
  type: z.string(),
  text: z.string().nullable(),
  media: z.record(z.string(), z.unknown()).nullable(),
  createdAt: z.string(),
});
export const EventRecord = z.object({
  id: z.string(),
  instanceId: z.string(),
  type: z.string(),
  createdAt: z.string(),
  data: z.record(z.string(), z.unknown()),
  delivery: z
    .object({
      status: z.string(),
      url: z.string().nullable(),
      attempts: z.number(),
      lastStatusCode: z.number().nullable(),
      lastError: z.string().nullable(),
      nextAttemptAt: z.string().nullable(),
      deliveredAt: z.string().nullable(),
    })
    .nullable(),
});
export const ProblemDocument = z.object({
  type: z.string(),
  title: z.string(),
  status: z.number(),
  detail: z.string(),
  code: z.string(),
  errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
});
/** The answer to every DELETE (decisions.md "Deletes"). */
export const Deleted = z.object({ id: z.string(), deleted: z.literal(true) });

export const listOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item) });
