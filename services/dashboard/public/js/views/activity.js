// Activity tab: a quick send form, then recent sends with their status, incoming messages and
// events with their webhook delivery result (exhausted ones can be retried, one by one or all at
// once; the events can be narrowed to the deliveries still failing or exhausted, which reaches
// those older than the last 50 events). Refreshed every few seconds; a table is redrawn only when its data changed, so
// keyboard focus is not lost.
import { path } from '../api.js';
import { badge, confirmAction, emptyState, field, form, formatDate, h, notify, replaceChildren, selectField, submitting, table, withButton } from '../dom.js';
import { startPolling } from '../poller.js';

const REFRESH_MS = 2500;
/** Shown media links are replaced by fresh ones this long before they expire. */
const LINK_RENEWAL_MS = 60_000;
/** What the events list can be narrowed to (the API's `deliveryStatus`), and what is said when none is. */
const EVENT_FILTERS = [
  { value: '', label: 'All events', none: 'No events yet.' },
  { value: 'retrying', label: 'Deliveries being retried', none: 'No delivery is being retried.' },
  { value: 'exhausted', label: 'Deliveries that gave up', none: 'No delivery has given up.' },
];

export function render(container, { api, instance }) {
  const id = instance.id;
  const sections = {
    sends: section('sends-title', 'Recent sends', 'The last 50 messages sent through the API, newest first.'),
    incoming: section('incoming-title', 'Incoming messages', 'The last 50 messages received, including the ones sent from the instance’s own phone.'),
    events: section('events-title', 'Events', 'The last 50 events (or those of the kind shown) and the result of their webhook delivery.'),
  };
  const eventFilter = selectField({ label: 'Show', name: 'deliveryStatus', options: EVENT_FILTERS });
  eventFilter.classList.add('list-filter');
  const eventFilterSelect = eventFilter.querySelector('select');
  eventFilterSelect.addEventListener('change', () => load().catch((error) => notify(error.detail, { error: true })));
  /** A retry of every exhausted delivery is under way: polls redraw its button disabled. */
  let retryingAll = false;
  sections.events.body.before(eventFilter);
  const lastShown = {};

  const sendForm = form(
    { class: 'inline', onsubmit: (event) => send(event) },
    field({ label: 'To', name: 'phone', type: 'tel', hint: 'Digits with country code, or a group id', attrs: { autocomplete: 'off', spellcheck: 'false' } }),
    field({ label: 'Text', name: 'text', attrs: { autocomplete: 'off', maxlength: '16000' } }),
    h('button', { type: 'submit' }, 'Send text'),
  );

  container.append(
    h('div', { class: 'stack' }, h('section', { class: 'card', 'aria-labelledby': 'send-title' }, h('h2', { id: 'send-title' }, 'Send a text message'), sendForm), sections.sends.el, sections.incoming.el, sections.events.el),
  );

  async function load() {
    const filter = eventFilterSelect.value;
    const [sends, incoming, events] = await Promise.all([
      api.get(path`/api/instances/${id}/messages`),
      api.get(path`/api/instances/${id}/incoming`),
      api.get(path`/api/instances/${id}/events` + (filter ? `?deliveryStatus=${encodeURIComponent(filter)}` : '')),
    ]);
    show('sends', sends.data, sendsTable);
    show('incoming', incoming.data, incomingTable, { resignedLinks: true });
    // A poll that began before the filter changed must not draw the other kind over it. The same
    // rows read differently under another filter (its empty text, its button) or during a retry.
    if (filter === eventFilterSelect.value) show('events', events.data, eventsTable, { drawnWith: { filter, retryingAll } });
  }

  /** `resignedLinks`: the rows' media links are signed afresh on every read (incoming records;
   *  an event keeps the link it was recorded with). They are compared without their signature,
   *  and redrawn only when the shown ones are about to expire, so keyboard focus is not lost
   *  every poll. `drawnWith`: what else the drawing depends on; a change redraws too. */
  function show(name, rows, draw, { resignedLinks = false, drawnWith } = {}) {
    const now = Date.now();
    let firstExpiry = Infinity;
    const fingerprint = JSON.stringify({ drawnWith, rows }, (key, value) => {
      if (!resignedLinks || key !== 'url' || typeof value !== 'string' || !value.includes('?')) return value;
      const expires = Number(new URL(value, location.href).searchParams.get('expires')) * 1000;
      if (expires > now) firstExpiry = Math.min(firstExpiry, expires);
      return value.slice(0, value.indexOf('?'));
    });
    const shown = lastShown[name];
    // Renewed a minute before they expire, or halfway through a shorter life.
    const margin = shown ? Math.min(LINK_RENEWAL_MS, (shown.firstExpiry - shown.at) / 2) : 0;
    if (shown?.fingerprint === fingerprint && shown.firstExpiry - now > margin) return;
    lastShown[name] = { fingerprint, firstExpiry, at: now };
    const hadFocus = sections[name].body.contains(document.activeElement) ? document.activeElement.dataset.focusKey : undefined;
    replaceChildren(sections[name].body, draw(rows));
    // The focused control may be gone (a retried delivery has no Retry button): its section's
    // heading takes the focus rather than the page.
    if (hadFocus) (sections[name].body.querySelector(`[data-focus-key="${CSS.escape(hadFocus)}"]`) ?? sections[name].heading).focus();
  }

  function sendsTable(rows) {
    if (!rows.length) return emptyState('Nothing sent yet.', 'Messages sent through the API appear here with their progress.');
    return table({
      caption: 'Recent sends',
      columns: [
        { label: 'Created', cell: (m) => formatDate(m.createdAt) },
        { label: 'To', cell: (m) => m.phone },
        { label: 'Type', cell: (m) => m.type },
        { label: 'Status', cell: (m) => badge(m.status) },
        { label: 'Details', wrap: true, cell: (m) => (m.error ? `${m.error.code}: ${m.error.message}` : h('code', { title: 'Local id' }, m.id)) },
      ],
      rows: rows.map((m) => ({ data: m, attrs: { 'data-message-id': m.id } })),
    });
  }

  function incomingTable(rows) {
    if (!rows.length) return emptyState('No incoming messages yet.', 'Messages arrive once the instance is connected.');
    return table({
      caption: 'Incoming messages',
      columns: [
        { label: 'Received', cell: (m) => formatDate(m.createdAt) },
        { label: 'From', cell: (m) => (m.fromMe ? (m.fromApi ? 'This instance (API)' : 'This instance (phone)') : [m.name, m.phone ?? m.from].filter(Boolean).join(' · ')) },
        { label: 'Type', cell: (m) => m.type },
        { label: 'Content', wrap: true, cell: (m) => [m.text ?? '', mediaCell(m.media)] },
      ],
      rows: rows.map((m) => ({ data: m, attrs: { 'data-incoming-id': m.id } })),
    });
  }

  function eventsTable(rows) {
    if (!rows.length) {
      const filter = EVENT_FILTERS.find((f) => f.value === eventFilterSelect.value);
      return emptyState(filter.none, filter.value ? 'Choose “All events” to see every event.' : 'Connection changes, messages and test events are listed here.');
    }
    const list = table({
      caption: 'Events',
      columns: [
        { label: 'Created', cell: (e) => formatDate(e.createdAt) },
        { label: 'Type', cell: (e) => h('code', {}, e.type) },
        { label: 'Delivery', cell: (e) => (e.delivery ? badge(e.delivery.status) : badge('not_routed')) },
        { label: 'Attempts', cell: (e) => String(e.delivery?.attempts ?? 0) },
        { label: 'Last result', wrap: true, cell: (e) => lastResult(e.delivery) },
        { label: 'Actions', cell: (e) => (e.delivery?.status === 'exhausted' ? retryButton(e) : '—') },
      ],
      rows: rows.map((e) => ({ data: e, attrs: { 'data-event-id': e.id } })),
    });
    return eventFilterSelect.value === 'exhausted' ? [retryAllButton(), list] : list;
  }

  function retryAllButton() {
    const label = retryingAll ? 'Retrying…' : 'Retry every delivery that gave up';
    const button = h('button', { type: 'button', class: 'secondary', 'data-focus-key': 'retry-all', disabled: retryingAll, 'aria-busy': retryingAll ? 'true' : undefined, onclick: () => retryAll(button) }, label);
    return h('p', {}, button);
  }

  async function retryAll(button) {
    const ok = await confirmAction('Each delivery that gave up is sent again to where the webhook configuration routes it now.', { title: 'Retry every delivery that gave up?', confirmLabel: 'Retry all' });
    if (!ok) return;
    retryingAll = true;
    button.textContent = 'Retrying…';
    try {
      await withButton(button, async () => {
        const { retried, notRetryable } = await api.post(path`/api/instances/${id}/events/retry`);
        const left = notRetryable ? ` Not retried: ${count(notRetryable, 'delivery', 'deliveries')} (filtered out, or no URL now).` : '';
        notify(`${count(retried, 'delivery', 'deliveries')} restarted.${left}`);
      });
    } finally {
      retryingAll = false;
    }
    await load().catch((error) => notify(error.detail, { error: true }));
    // Redrawn: the button again if some are left, otherwise the section's heading.
    (sections.events.body.querySelector('[data-focus-key="retry-all"]') ?? sections.events.heading).focus();
  }

  function retryButton(event) {
    const button = h('button', { type: 'button', class: 'secondary small', 'data-focus-key': `retry-${event.id}`, onclick: () => retry(button, event) }, 'Retry', h('span', { class: 'visually-hidden' }, ` delivery of ${event.type}`));
    return button;
  }

  async function retry(button, event) {
    await withButton(button, async () => {
      await api.post(path`/api/instances/${id}/events/${event.id}/retry`);
      notify(`Delivery of ${event.type} restarted.`);
      await load();
    });
    if (!button.isConnected) sections.events.heading.focus(); // a retried delivery has no Retry button
  }

  async function send(event) {
    event.preventDefault();
    const data = new FormData(sendForm);
    const body = { phone: String(data.get('phone')).trim(), type: 'text', text: String(data.get('text')) };
    // One key per submission: a network retry of this request cannot queue the message twice.
    const headers = { 'idempotency-key': crypto.randomUUID() };
    const accepted = await submitting(sendForm, () => api.post(path`/api/instances/${id}/messages`, body, { headers }));
    if (!accepted) return;
    sendForm.elements.namedItem('text').value = '';
    notify('Message queued. Its status updates below.');
    await load();
  }

  load().catch((error) => replaceChildren(sections.sends.body, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
  const poller = startPolling(load, REFRESH_MS);
  return { dispose: poller.stop };
}

function section(titleId, title, description) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const heading = h('h2', { id: titleId, tabindex: '-1' }, title);
  const el = h('section', { class: 'card', 'aria-labelledby': titleId }, heading, h('p', { class: 'muted small' }, description), body);
  return { el, body, heading };
}

function lastResult(delivery) {
  if (!delivery) return '—';
  const parts = [];
  // An HTTP failure's error already names its status ("HTTP 500", "HTTP 302 (redirects…)"): show it once.
  const status = delivery.lastStatusCode ? `HTTP ${delivery.lastStatusCode}` : '';
  const errorNamesStatus = Boolean(status && delivery.lastError?.startsWith(status));
  if (status && !errorNamesStatus) parts.push(status);
  if (delivery.lastError) parts.push(delivery.lastError);
  if (delivery.deliveredAt) parts.push(`delivered ${formatDate(delivery.deliveredAt)}`);
  else if (delivery.nextAttemptAt && delivery.status !== 'exhausted') parts.push(`next try ${formatDate(delivery.nextAttemptAt)}`);
  return parts.join(' · ') || '—';
}

/** Media links are signed and expire; they open in a new tab without sending a referrer. */
function mediaCell(media) {
  if (!media) return null;
  if (!media.url) return h('span', { class: 'muted' }, ` [${media.mimetype ?? 'media'} unavailable${media.error ? `: ${media.error}` : ''}]`);
  return h('span', {}, ' ', h('a', { href: media.url, target: '_blank', rel: 'noopener noreferrer' }, `Download ${media.fileName ?? media.mimetype ?? 'file'}`));
}

function count(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}
