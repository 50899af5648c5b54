// Webhook tab: every destination URL and boolean setting in one form (saved at once, as the API
// replaces the whole configuration), the signing secret (revealed on demand, regenerable) and the
// test event.
import { path } from '../api.js';
import { confirmAction, field, form, h, notify, replaceChildren, secretValue, submitting, withButton } from '../dom.js';

const DESTINATIONS = [
  { name: 'url', label: 'General URL', hint: 'Receives every event without its own URL below, and test events.' },
  { name: 'received', label: 'Received messages', hint: 'message.received' },
  { name: 'delivery', label: 'Send results', hint: 'message.sent, message.failed, message.uncertain' },
  { name: 'status', label: 'Delivery status', hint: 'message.status (delivered, read, played…)' },
  { name: 'connected', label: 'Connected', hint: 'connection.update when the instance connects' },
  { name: 'disconnected', label: 'Disconnected', hint: 'connection.update when it leaves the connected state' },
  { name: 'presence', label: 'Presence', hint: 'chat.presence' },
];

const SETTING_GROUPS = [
  {
    legend: 'Events to leave out',
    settings: [
      ['ignoreReceived', 'Received messages'],
      ['ignoreDelivery', 'Send results'],
      ['ignoreStatus', 'Delivery status updates'],
      ['ignorePresence', 'Presence updates'],
      ['ignoreConnected', 'Connected'],
      ['ignoreDisconnected', 'Disconnected'],
    ],
  },
  {
    legend: 'Received messages to leave out',
    settings: [
      ['ignoreGroups', 'Group messages'],
      ['ignorePrivate', 'Private messages'],
      ['ignoreText', 'Text'],
      ['ignoreImage', 'Images'],
      ['ignoreVideo', 'Videos'],
      ['ignoreAudio', 'Audio'],
      ['ignoreDocument', 'Documents'],
      ['notifyFromMe', 'Include the instance’s own messages (otherwise left out)'],
    ],
  },
  {
    legend: 'Behaviour',
    settings: [
      ['autoRejectCalls', 'Reject incoming calls'],
      ['autoReadMessages', 'Mark received messages as read'],
      ['autoReadStatus', 'Mark status updates as read'],
      ['protectAnnouncementGroups', 'Fail sends to announcement-only groups where the instance is not admin'],
      ['disableOfflineQueue', 'Refuse sends while not connected instead of queuing them'],
    ],
  },
];

export function render(container, { api, instance }) {
  const id = instance.id;
  // The settings as this form showed them: a save sends only those changed here, so a change
  // made elsewhere meanwhile (PUT …/settings is a partial update) is not undone.
  let shownSettings = { ...(instance.settings ?? {}) };
  const webhookForm = form(
    { onsubmit: (event) => save(event) },
    h(
      'fieldset',
      {},
      h('legend', {}, 'Destinations'),
      h('p', { class: 'hint' }, 'Public HTTPS URLs on port 443, or empty. A specific URL replaces the general one for its events.'),
      DESTINATIONS.map((d) => field({ label: d.label, name: d.name, hint: d.hint, value: instance.webhook?.[d.name] ?? '', attrs: { inputmode: 'url', autocomplete: 'off', spellcheck: 'false', placeholder: 'https://' } })),
    ),
    SETTING_GROUPS.map((group) =>
      h('fieldset', {}, h('legend', {}, group.legend), h('div', { class: 'checks' }, group.settings.map(([name, label]) => checkbox(`settings.${name}`, label, instance.settings?.[name])))),
    ),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save webhook')),
  );

  const secretArea = h('div', { 'aria-live': 'polite' });
  const testButton = h('button', { type: 'button', class: 'secondary', onclick: () => sendTest() }, 'Send test event');

  container.append(
    h(
      'div',
      { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'webhook-title' }, h('h2', { id: 'webhook-title' }, 'Webhook configuration'), webhookForm),
      h(
        'div',
        { class: 'stack' },
        h(
          'section',
          { class: 'card', 'aria-labelledby': 'secret-title' },
          h('h2', { id: 'secret-title' }, 'Signing secret'),
          h('p', { class: 'muted small' }, 'Deliveries carry X-Service-Signature: an HMAC-SHA256 of timestamp + "." + body with this secret. Verify it before trusting a request.'),
          h('div', { class: 'actions' }, h('button', { type: 'button', class: 'secondary', onclick: (event) => revealSecret(event.currentTarget) }, 'Reveal secret'), h('button', { type: 'button', class: 'secondary', onclick: (event) => regenerateSecret(event.currentTarget) }, 'Regenerate secret')),
          secretArea,
        ),
        h(
          'section',
          { class: 'card', 'aria-labelledby': 'test-title' },
          h('h2', { id: 'test-title' }, 'Test event'),
          h('p', { class: 'muted small' }, 'Queues a webhook.test event to the general URL. Do not point it at a production consumer. Its delivery shows in Activity.'),
          testButton,
        ),
      ),
    ),
  );

  async function save(event) {
    event.preventDefault();
    const data = new FormData(webhookForm);
    const body = { format: 'native', settings: {} };
    for (const d of DESTINATIONS) body[d.name] = String(data.get(d.name) ?? '').trim();
    for (const group of SETTING_GROUPS) {
      for (const [name] of group.settings) {
        const checked = data.get(`settings.${name}`) === 'on';
        if (checked !== Boolean(shownSettings[name])) body.settings[name] = checked;
      }
    }
    const saved = await submitting(webhookForm, () => api.put(path`/api/instances/${id}/webhook`, body));
    if (!saved) return;
    shownSettings = { ...saved.settings };
    for (const [name, value] of Object.entries(shownSettings)) {
      const box = webhookForm.elements.namedItem(`settings.${name}`);
      if (box) box.checked = Boolean(value);
    }
    notify('Webhook saved.');
  }

  async function revealSecret(button) {
    await withButton(button, async () => {
      const { secret } = await api.get(path`/api/instances/${id}/webhook/secret`);
      replaceChildren(secretArea, h('div', { class: 'reveal' }, secretValue('Signing secret', secret)));
    });
  }

  async function regenerateSecret(button) {
    const ok = await confirmAction('Receivers must switch to the new secret. Pending deliveries are cancelled.', { title: 'Regenerate the signing secret?', confirmLabel: 'Regenerate' });
    if (!ok) return;
    await withButton(button, async () => {
      const { secret } = await api.post(path`/api/instances/${id}/webhook/secret`);
      replaceChildren(secretArea, h('div', { class: 'reveal' }, h('p', {}, 'New secret; the previous one is no longer used.'), secretValue('Signing secret', secret)));
      notify('Signing secret regenerated.');
    });
  }

  async function sendTest() {
    await withButton(testButton, async () => {
      const event = await api.post(path`/api/instances/${id}/webhook/test`);
      notify(event.data?.url ? 'Test event queued; follow its delivery in Activity.' : 'Test event recorded, but there is no general URL to deliver it to.');
    });
  }

  return {};
}

function checkbox(name, label, checked) {
  const id = `f-${name.replace(/\W/g, '-')}`;
  return h('div', { class: 'check' }, h('input', { type: 'checkbox', id, name, checked: Boolean(checked) }), h('label', { for: id, class: 'check-label' }, label));
}
