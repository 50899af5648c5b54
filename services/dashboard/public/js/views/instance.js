// One instance: header with live state and the tabs Overview, Access, Webhook, Activity. This
// module owns the instance refresh (fast while a QR code or connection is pending) and hands each
// fresh record to the tab on screen.
import { badge, h, humanize, replaceChildren } from '../dom.js';
import { path } from '../api.js';
import { startPolling } from '../poller.js';
import * as overviewTab from './connection.js';
import * as accessTab from './access.js';
import * as webhookTab from './webhook.js';
import * as activityTab from './activity.js';

const TABS = [
  { id: 'overview', label: 'Overview', module: overviewTab },
  { id: 'access', label: 'Access', module: accessTab },
  { id: 'webhook', label: 'Webhook', module: webhookTab },
  { id: 'activity', label: 'Activity', module: activityTab },
];
const PENDING_STATES = new Set(['starting', 'awaiting_scan', 'reconnecting']);
const FAST_REFRESH_MS = 1500;
const SLOW_REFRESH_MS = 8000;

export function render(container, { api, navigate, params }) {
  const tab = TABS.find((t) => t.id === params.tab) ?? TABS[0];
  const base = `#/instances/${encodeURIComponent(params.id)}`;
  let instance;
  let tabHandle = {};
  const title = h('h1', { tabindex: '-1' }, 'Instance');
  const stateHolder = h('span', { 'aria-live': 'polite', 'aria-atomic': 'true', class: 'instance-state' });
  const meta = h('p', { class: 'muted small' });
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));

  container.append(
    h('p', { class: 'small' }, h('a', { href: '#/instances' }, '← All instances')),
    h('div', { class: 'page-head' }, h('div', {}, title, meta), stateHolder),
    h('nav', { class: 'tabs', 'aria-label': 'Instance sections' }, TABS.map((t) => h('a', { href: t.id === 'overview' ? base : `${base}/${t.id}`, 'aria-current': t === tab ? 'page' : undefined }, t.label))),
    body,
  );

  const load = async () => {
    instance = await api.get(path`/api/instances/${params.id}`);
    showHeader();
    tabHandle.update?.(instance);
    return instance;
  };
  // Tabs call this after an action (connect, rename…): show the result now and pick the pace again.
  const refresh = async () => {
    const fresh = await load();
    poller.reschedule();
    return fresh;
  };

  function showHeader() {
    title.textContent = instance.name;
    document.title = `${instance.name} · Switchboard`;
    replaceChildren(meta, 'Id ', h('code', {}, instance.id), instance.phone ? ` · Phone ${instance.phone}` : '');
    const current = stateHolder.querySelector('[data-status]')?.dataset.status;
    if (current !== instance.state) replaceChildren(stateHolder, h('span', { class: 'visually-hidden' }, 'State: '), badge(instance.state));
    stateHolder.title = humanize(instance.state);
  }

  load()
    .then(() => {
      body.replaceChildren();
      tabHandle = tab.module.render(body, { api, navigate, instance, refresh }) ?? {};
    })
    .catch((error) => {
      title.textContent = error.status === 404 ? 'Instance not found' : 'Instance';
      replaceChildren(body, h('p', { class: 'form-error', role: 'alert' }, error.detail));
    });

  const poller = startPolling(load, () => (instance && PENDING_STATES.has(instance.state) ? FAST_REFRESH_MS : SLOW_REFRESH_MS));
  return () => {
    poller.stop();
    tabHandle.dispose?.();
    document.title = 'Switchboard';
  };
}
