// Access tab: the instance's credentials (revealed on demand), token renewal and integration keys
// (a new key is shown once; each key can be revoked).
import { path } from '../api.js';
import { confirmAction, emptyState, field, form, formatDate, h, notify, replaceChildren, secretValue, submitting, table, withButton } from '../dom.js';

export function render(container, { api, instance }) {
  const id = instance.id;
  const credentialsArea = h('div', { id: 'credentials-area' });
  const revealButton = h('button', { type: 'button', class: 'secondary', 'aria-expanded': 'false', 'aria-controls': 'credentials-area', onclick: () => toggleCredentials() }, 'Reveal credentials');
  const tokenArea = h('div', { 'aria-live': 'polite' });
  const keysArea = h('div', {}, h('p', { class: 'muted' }, 'Loading keys…'));
  const newKeyArea = h('div', { 'aria-live': 'polite' });
  const keyForm = form(
    { class: 'inline', onsubmit: (event) => createKey(event) },
    field({ label: 'Key name', name: 'name', hint: 'Which system uses it, 2 to 70 characters', attrs: { maxlength: '70', autocomplete: 'off' } }),
    h('button', { type: 'submit' }, 'Create key'),
  );

  container.append(
    h(
      'div',
      { class: 'grid' },
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'credentials-title' },
        h('h2', { id: 'credentials-title' }, 'Instance credentials'),
        h('p', { class: 'muted small' }, 'The instance token gives full access to this instance only. Keep it on your backend.'),
        h('div', { class: 'actions' }, revealButton),
        credentialsArea,
      ),
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'token-title' },
        h('h2', { id: 'token-title' }, 'Renew the token'),
        h('p', { class: 'muted small' }, 'Issues a new instance token. The current one stops working at once.'),
        h('button', { type: 'button', class: 'secondary', onclick: (event) => renewToken(event.currentTarget) }, 'Renew token'),
        tokenArea,
      ),
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'keys-title' },
      h('h2', { id: 'keys-title' }, 'Integration keys'),
      h('p', { class: 'muted small' }, 'One key per external system; each gives access to this instance only and can be revoked on its own.'),
      keysArea,
      h('h3', {}, 'Create a key'),
      keyForm,
      newKeyArea,
    ),
  );

  function hideCredentials() {
    credentialsArea.replaceChildren();
    revealButton.setAttribute('aria-expanded', 'false');
    revealButton.textContent = 'Reveal credentials';
  }

  async function toggleCredentials() {
    if (revealButton.getAttribute('aria-expanded') === 'true') return hideCredentials();
    await withButton(revealButton, async () => {
      const credentials = await api.get(path`/api/instances/${id}/credentials`);
      replaceChildren(
        credentialsArea,
        h('div', { class: 'reveal' }, secretValue('Instance id', credentials.instanceId), secretValue('API URL', credentials.apiUrl), secretValue('Instance token', credentials.apiToken)),
      );
      revealButton.setAttribute('aria-expanded', 'true');
      revealButton.textContent = 'Hide credentials';
    });
  }

  async function renewToken(button) {
    const ok = await confirmAction('Every system using the current instance token loses access until it gets the new one.', { title: 'Renew the instance token?', confirmLabel: 'Renew token' });
    if (!ok) return;
    await withButton(button, async () => {
      const { apiToken } = await api.post(path`/api/instances/${id}/token`);
      replaceChildren(tokenArea, h('div', { class: 'reveal' }, h('p', {}, 'New instance token. The previous token no longer works.'), secretValue('New instance token', apiToken)));
      hideCredentials(); // what it showed is the old token
      notify('Token renewed.');
    });
  }

  async function loadKeys() {
    const keys = (await api.get(path`/api/instances/${id}/apps`)).data;
    if (keys.length === 0) return replaceChildren(keysArea, emptyState('No integration keys.', 'Create one for each system that calls the API for this instance.'));
    replaceChildren(
      keysArea,
      table({
        caption: 'Integration keys',
        columns: [
          { label: 'Name', cell: (k) => k.name },
          { label: 'Key starts with', cell: (k) => h('code', {}, `${k.keyPrefix}…`) },
          { label: 'Created', cell: (k) => formatDate(k.createdAt) },
          { label: 'Actions', cell: (k) => h('button', { type: 'button', class: 'secondary small', onclick: (event) => revoke(event.currentTarget, k) }, 'Revoke', h('span', { class: 'visually-hidden' }, ` ${k.name}`)) },
        ],
        rows: keys.map((k) => ({ data: k, attrs: { 'data-app-id': k.appId } })),
      }),
    );
  }

  async function createKey(event) {
    event.preventDefault();
    const name = String(new FormData(keyForm).get('name')).trim();
    const created = await submitting(keyForm, () => api.post(path`/api/instances/${id}/apps`, { name, projectId: instance.projectId ?? null }));
    if (!created) return;
    keyForm.reset();
    replaceChildren(newKeyArea, h('div', { class: 'reveal' }, h('p', {}, h('strong', {}, 'Copy this key now: it is shown only once.')), secretValue(`Key “${created.name}”`, created.key)));
    await loadKeys();
  }

  async function revoke(button, key) {
    const ok = await confirmAction(`The system using “${key.name}” loses access immediately.`, { title: 'Revoke this key?', confirmLabel: 'Revoke' });
    if (!ok) return;
    await withButton(button, async () => {
      await api.delete(path`/api/instances/${id}/apps/${key.appId}`);
      notify(`Key “${key.name}” revoked.`);
      newKeyArea.replaceChildren();
      await loadKeys();
    });
  }

  loadKeys().catch((error) => replaceChildren(keysArea, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
  return {};
}
