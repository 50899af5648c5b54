// Overview tab of an instance: connection state with the QR code (refreshed by instance.js while
// awaiting a scan), connect/disconnect/reset, phone pairing code, rename/move, delete.
import { path } from '../api.js';
import { confirmAction, field, form, formatDate, h, notify, replaceChildren, selectField, submitting, withButton } from '../dom.js';

const STATE_TEXT = {
  stopped: 'The session is stopped. Connect to start it.',
  starting: 'Starting the session…',
  awaiting_scan: 'Waiting for the QR code to be scanned.',
  connected: 'Connected and ready to send and receive.',
  reconnecting: 'The connection dropped; it reconnects by itself. Sends wait in the queue meanwhile.',
  logged_out: 'Not linked to a phone: the phone unlinked it, or nobody paired it in time. Connect to pair it.',
};

export function render(container, { api, navigate, instance, refresh }) {
  const id = instance.id;
  const stateText = h('p', { class: 'state-text' });
  const qrArea = h('div', { class: 'qr', hidden: true });
  const qrImage = h('img', { alt: 'QR code to link this instance: scan it with WhatsApp on the phone', width: '264', height: '264' });
  qrArea.append(
    qrImage,
    h('ol', {}, h('li', {}, 'Open WhatsApp on the phone.'), h('li', {}, 'Go to Settings → Linked devices → Link a device.'), h('li', {}, 'Point the phone at this code. It renews itself until scanned.')),
  );

  const connectButton = h('button', { type: 'button', onclick: () => lifecycle(connectButton, 'connect', 'Connecting…') }, 'Connect');
  const disconnectButton = h('button', { type: 'button', class: 'secondary', onclick: () => lifecycle(disconnectButton, 'disconnect', 'Disconnected; credentials are kept.') }, 'Disconnect');
  const resetButton = h('button', { type: 'button', class: 'secondary', onclick: () => reset() }, 'Reset');

  const pairingResult = h('div', { 'aria-live': 'polite' });
  const pairingForm = form(
    { class: 'inline', onsubmit: (event) => requestPairingCode(event) },
    field({ label: 'Phone number', name: 'phone', type: 'tel', hint: 'Digits only: country code, area code and number.', attrs: { inputmode: 'numeric', autocomplete: 'off' } }),
    h('button', { type: 'submit', class: 'secondary' }, 'Get pairing code'),
  );
  const pairingCard = h(
    'section',
    { class: 'card', 'aria-labelledby': 'pairing-title' },
    h('h2', { id: 'pairing-title' }, 'Pair with a phone number instead'),
    h('p', { class: 'muted small' }, 'Request a code, then on the phone choose Link with phone number and type it. One code per minute.'),
    pairingForm,
    pairingResult,
  );

  const detailsArea = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));

  container.append(
    h(
      'div',
      { class: 'grid' },
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'connection-title' },
        h('h2', { id: 'connection-title' }, 'Connection'),
        stateText,
        qrArea,
        h('div', { class: 'actions' }, connectButton, disconnectButton, resetButton),
      ),
      pairingCard,
      h('section', { class: 'card', 'aria-labelledby': 'details-title' }, h('h2', { id: 'details-title' }, 'Details'), detailsArea),
      h(
        'section',
        { class: 'card danger-zone', 'aria-labelledby': 'delete-title' },
        h('h2', { id: 'delete-title' }, 'Delete this instance'),
        h('p', { class: 'muted small' }, 'Removes its session, credentials, keys and records. This cannot be undone.'),
        h('button', { type: 'button', class: 'danger', onclick: (event) => remove(event.currentTarget) }, 'Delete instance'),
      ),
    ),
  );

  let latest = instance;
  function update(current) {
    latest = current;
    const paused = current.paused && current.state === 'stopped';
    stateText.textContent = paused ? 'Paused by a disconnect; credentials are kept. Connect to resume.' : STATE_TEXT[current.state] ?? current.state;
    if (current.state === 'connected' && current.phone) stateText.textContent = `Connected as +${current.phone}.`;
    const showQr = current.state === 'awaiting_scan' && Boolean(current.qrImage);
    qrArea.hidden = !showQr;
    if (showQr && qrImage.getAttribute('src') !== current.qrImage) qrImage.src = current.qrImage;
    connectButton.hidden = !(current.state === 'stopped' || current.state === 'logged_out' || current.paused);
    disconnectButton.hidden = current.state === 'stopped';
    pairingCard.hidden = current.state === 'connected';
  }

  async function lifecycle(button, action, message) {
    await withButton(button, async () => {
      await api.post(path`/api/instances/${id}/${action}`);
      notify(message);
      await refresh();
    });
  }

  async function reset() {
    const ok = await confirmAction('Resetting unlinks the phone and clears the session. A new QR scan or pairing is needed to use this instance again.', { title: 'Reset this instance?', confirmLabel: 'Reset' });
    if (ok) await lifecycle(resetButton, 'reset', 'Instance reset; pair it again to use it.');
  }

  async function requestPairingCode(event) {
    event.preventDefault();
    const phone = String(new FormData(pairingForm).get('phone')).trim();
    if (latest.paused && latest.phone) {
      const message = `This instance keeps its link to +${latest.phone}. A pairing code links a new device: that link is given up first, as a reset does.`;
      if (!(await confirmAction(message, { title: 'Pair this instance again?', confirmLabel: 'Give up the link and pair' }))) return;
    }
    const result = await submitting(pairingForm, () => api.post(path`/api/instances/${id}/pairing-code`, { phone }));
    if (!result) return;
    replaceChildren(
      pairingResult,
      h('div', { class: 'reveal' }, h('p', {}, 'Type this code on the phone:'), h('p', { class: 'pairing-code' }, result.code), h('p', { class: 'small muted' }, `Valid until ${formatDate(result.expiresAt)}.`)),
    );
    refresh().catch(() => {});
  }

  /** The name and project as the details form showed them. */
  let shownDetails = { name: instance.name, projectId: instance.projectId ?? null };
  async function showDetails() {
    const projects = (await api.get('/api/projects')).data;
    const detailsForm = form(
      { onsubmit: (event) => saveDetails(event, detailsForm) },
      field({ label: 'Name', name: 'name', value: instance.name, attrs: { maxlength: '70', autocomplete: 'off' } }),
      selectField({ label: 'Project', name: 'projectId', value: instance.projectId ?? '', options: [{ value: '', label: 'No project' }, ...projects.map((p) => ({ value: p.id, label: p.name }))] }),
      h('button', { type: 'submit', class: 'secondary' }, 'Save details'),
    );
    replaceChildren(detailsArea, h('p', { class: 'small muted' }, `Created ${formatDate(instance.createdAt)}`), detailsForm);
  }

  async function saveDetails(event, detailsForm) {
    event.preventDefault();
    const data = new FormData(detailsForm);
    // Only what was changed here: a rename or move made elsewhere meanwhile is not undone.
    const edited = { name: String(data.get('name')).trim(), projectId: data.get('projectId') || null };
    const changes = Object.fromEntries(Object.entries(edited).filter(([key, value]) => value !== shownDetails[key]));
    const saved = await submitting(detailsForm, () => api.patch(path`/api/instances/${id}`, changes));
    if (!saved) return;
    shownDetails = edited;
    notify('Details saved.');
    await refresh();
  }

  async function remove(button) {
    const ok = await confirmAction(`Delete “${latest.name}”? A connected session is unlinked from the phone; its credentials and records are removed.`, { title: 'Delete this instance?', confirmLabel: 'Delete' });
    if (!ok) return;
    await withButton(button, async () => {
      await api.delete(path`/api/instances/${id}`);
      notify(`Instance “${latest.name}” deleted.`);
      navigate('#/instances');
    });
  }

  update(instance);
  showDetails().catch((error) => replaceChildren(detailsArea, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
  return { update };
}
