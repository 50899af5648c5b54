// Entry point: hash router (#/instances, #/instances/<id>/<tab>, #/projects, #/stats), sign-in
// gate and navigation. Each view is one module exporting render(container, ctx) → cleanup?.
import { createApi } from './api.js';
import { forgetAdminKey, readAdminKey, saveAdminKey } from './session.js';
import { h, notify } from './dom.js';
import * as signInView from './views/sign-in.js';
import * as instancesView from './views/instances.js';
import * as instanceView from './views/instance.js';
import * as projectsView from './views/projects.js';
import * as statsView from './views/stats.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
let disposeView = () => {};

const api = createApi({
  getKey: readAdminKey,
  // Once: the requests that were in flight with the refused key fail together.
  onUnauthorized: () => readAdminKey() && signOut('The administrative key is no longer accepted. Sign in again.'),
});

const ROUTES = [
  { section: 'instances', view: instancesView, match: (s) => s.length === 0 || (s[0] === 'instances' && s.length === 1) },
  // An id is letters, digits, "_" and "-": "." or ".." would name another API path.
  { section: 'instances', view: instanceView, match: (s) => s[0] === 'instances' && s.length >= 2 && /^[\w-]+$/.test(s[1]), params: (s) => ({ id: s[1], tab: s[2] ?? 'overview' }) },
  { section: 'projects', view: projectsView, match: (s) => s[0] === 'projects' },
  { section: 'stats', view: statsView, match: (s) => s[0] === 'stats' },
];

function parseHash(hash) {
  const [pathPart, queryPart = ''] = hash.replace(/^#\/?/, '').split('?');
  const segments = pathPart.split('/').filter(Boolean).map((s) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  });
  return { segments, query: new URLSearchParams(queryPart) };
}

function render({ focus = true } = {}) {
  disposeView();
  disposeView = () => {};
  const signedIn = Boolean(readAdminKey());
  nav.hidden = !signedIn;
  if (!signedIn) return mount(signInView, { onSignedIn: signIn }, focus);
  const { segments, query } = parseHash(location.hash);
  const route = ROUTES.find((r) => r.match(segments));
  markCurrentSection(route?.section);
  if (!route) return mount(notFoundView, {}, focus);
  mount(route.view, { params: route.params?.(segments) ?? {}, query }, focus);
}

function mount(view, routeInfo, focus) {
  // A fresh container per view: a view still loading after it was left writes into a detached node.
  const container = h('div', { class: 'view' });
  main.replaceChildren(container);
  const dispose = view.render(container, { api, navigate, ...routeInfo });
  disposeView = typeof dispose === 'function' ? dispose : () => {};
  if (focus) container.querySelector('h1')?.focus();
}

function markCurrentSection(section) {
  for (const link of nav.querySelectorAll('a[data-section]')) {
    if (link.dataset.section === section) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function signIn(key) {
  saveAdminKey(key);
  if (!location.hash || location.hash === '#') location.hash = '#/instances';
  render();
}

function signOut(message) {
  forgetAdminKey();
  render();
  if (message) notify(message, { error: true });
}

const notFoundView = {
  render(container) {
    container.append(
      h('h1', { tabindex: '-1' }, 'Page not found'),
      h('p', {}, 'This address does not match a dashboard page. ', h('a', { href: '#/instances' }, 'Go to the instances.')),
    );
  },
};

document.getElementById('sign-out').addEventListener('click', () => signOut());
// The skip link moves the focus without touching the address: the hash belongs to the router.
document.querySelector('.skip-link').addEventListener('click', (event) => {
  event.preventDefault();
  document.getElementById('main').focus();
});
window.addEventListener('hashchange', () => render());
render({ focus: false });
