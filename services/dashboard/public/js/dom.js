// Small DOM helpers shared by the views. Text always goes in as text nodes (never innerHTML), so
// names and messages coming from the API cannot inject markup.

/** h('button', {class: 'x', onclick: fn, disabled: true}, 'Label', child) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    else if (name === 'text') el.textContent = value;
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replaceChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

let idCounter = 0;
export const uniqueId = (prefix) => `${prefix}-${++idCounter}`;

/** A labelled form field; `name` doubles as the API field path for error messages. */
export function field({ label, name, type = 'text', value = '', hint, required, attrs = {} }) {
  const id = uniqueId(`f-${name.replace(/\W/g, '-')}`);
  const hintId = hint ? `${id}-hint` : undefined;
  const input = h(type === 'textarea' ? 'textarea' : 'input', {
    id,
    name,
    ...(type === 'textarea' ? {} : { type }),
    required,
    'aria-describedby': hintId,
    ...attrs,
  });
  input.value = value ?? '';
  return h('div', { class: 'field' }, h('label', { for: id }, label), hint ? h('span', { class: 'hint', id: hintId }, hint) : null, input);
}

export function selectField({ label, name, options, value = '', hint }) {
  const id = uniqueId(`f-${name}`);
  const select = h('select', { id, name }, options.map((o) => h('option', { value: o.value }, o.label)));
  select.value = value ?? '';
  return h('div', { class: 'field' }, h('label', { for: id }, label), hint ? h('span', { class: 'hint' }, hint) : null, select);
}

/** A form with a place for its general error message (role=alert so it is announced). */
export function form(attrs, ...children) {
  return h('form', { novalidate: true, ...attrs }, h('div', { class: 'form-error', role: 'alert', 'data-form-error': true }), ...children);
}

export function clearFormProblem(formEl) {
  for (const el of formEl.querySelectorAll('[aria-invalid="true"]')) {
    el.removeAttribute('aria-invalid');
    const errorId = el.dataset.errorId;
    if (errorId) {
      document.getElementById(errorId)?.remove();
      const described = (el.getAttribute('aria-describedby') ?? '').split(' ').filter((x) => x && x !== errorId);
      if (described.length) el.setAttribute('aria-describedby', described.join(' '));
      else el.removeAttribute('aria-describedby');
      delete el.dataset.errorId;
    }
  }
  const general = formEl.querySelector('[data-form-error]');
  if (general) general.textContent = '';
}

/** Shows an ApiError: each field error next to its input, the rest (and `detail`) at the top. */
export function showFormProblem(formEl, error) {
  clearFormProblem(formEl);
  const unplaced = [];
  let first;
  for (const { path, message } of error.errors ?? []) {
    const input = formEl.elements.namedItem(path);
    if (!(input instanceof HTMLElement) || input instanceof RadioNodeList) {
      unplaced.push(`${path}: ${message}`);
      continue;
    }
    const errorId = `${input.id}-error`;
    input.setAttribute('aria-invalid', 'true');
    input.dataset.errorId = errorId;
    input.setAttribute('aria-describedby', [input.getAttribute('aria-describedby'), errorId].filter(Boolean).join(' '));
    input.closest('.field, .check')?.append(h('p', { class: 'field-error', id: errorId }, message));
    first ??= input;
  }
  const general = formEl.querySelector('[data-form-error]');
  if (general) general.textContent = [error.detail, ...unplaced].filter(Boolean).join(' ');
  first?.focus();
}

/** Runs `action` while the submit button shows it is busy; shows problems in the form. */
export async function submitting(formEl, action) {
  const buttons = [...formEl.querySelectorAll('button')];
  clearFormProblem(formEl);
  buttons.forEach((b) => (b.disabled = true));
  try {
    return await action();
  } catch (error) {
    showFormProblem(formEl, error);
    return undefined;
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

/** A short status message in the polite live region; errors use the alert style. */
export function notify(message, { error = false } = {}) {
  const region = document.getElementById('notices');
  const note = h('div', { class: error ? 'notice error' : 'notice' }, message);
  region.append(note);
  setTimeout(() => note.remove(), error ? 8000 : 4000);
}

/** Runs a button's action with the button disabled; failures become an error notice. */
export async function withButton(button, action) {
  button.disabled = true;
  try {
    return await action();
  } catch (error) {
    notify(error.detail ?? String(error), { error: true });
    return undefined;
  } finally {
    button.disabled = false;
  }
}

/** Accessible confirmation through the page's <dialog> (focus is trapped and restored by it). */
export function confirmAction(message, { title = 'Are you sure?', confirmLabel = 'Confirm' } = {}) {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-message').textContent = message;
  document.getElementById('confirm-ok').textContent = confirmLabel;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'confirm'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}

const TONES = {
  good: ['connected', 'delivered', 'read', 'played'],
  info: ['sent', 'starting', 'reconnecting', 'sending', 'pending', 'retrying', 'queued'],
  warn: ['awaiting_scan', 'uncertain'],
  bad: ['logged_out', 'failed', 'exhausted', 'expired'],
};

export function humanize(value) {
  const text = String(value ?? '').replace(/_/g, ' ');
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** A status badge; the raw value stays available to scripts and tests as data-status. */
export function badge(status) {
  const tone = Object.keys(TONES).find((t) => TONES[t].includes(status)) ?? '';
  return h('span', { class: `badge ${tone}`.trim(), 'data-status': status }, humanize(status));
}

export function emptyState(title, text) {
  return h('div', { class: 'empty' }, h('strong', {}, title), text ? h('span', {}, text) : null);
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
export function formatDate(iso) {
  return iso ? dateFormat.format(new Date(iso)) : '—';
}

/** A table that turns into stacked cards on narrow screens (cells carry their column label). */
export function table({ caption, columns, rows }) {
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'responsive' },
      caption ? h('caption', { class: 'visually-hidden' }, caption) : null,
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c.label)))),
      h('tbody', {}, rows.map((row) => h('tr', row.attrs ?? {}, columns.map((c) => h('td', { 'data-label': c.label, class: c.wrap ? 'wrap' : undefined }, c.cell(row.data)))))),
    ),
  );
}

/** A read-only secret value with a copy button. */
export function secretValue(label, value) {
  const id = uniqueId('secret');
  const input = h('input', { id, type: 'text', readonly: true, class: 'mono', spellcheck: 'false', autocomplete: 'off' });
  input.value = value;
  const copy = h('button', { type: 'button', class: 'secondary small', onclick: () => copyText(value, label) }, 'Copy');
  return h('div', { class: 'field' }, h('label', { for: id }, label), h('div', { class: 'secret-row' }, input, copy));
}

async function copyText(value, label) {
  try {
    await navigator.clipboard.writeText(value);
    notify(`${label} copied.`);
  } catch {
    notify('Copying is not available here; select the text and copy it.', { error: true });
  }
}
