// Instances: the list with live state (refreshed every few seconds, redrawn only when it changed,
// so keyboard focus stays put), a project filter kept in the address (#/instances?project=<id>)
// and the create form.
import { badge, emptyState, field, form, formatDate, h, notify, replaceChildren, selectField, submitting, table } from '../dom.js';
import { startPolling } from '../poller.js';

const REFRESH_MS = 5000;
const NO_PROJECT = 'none';

export function render(container, { api, navigate, query }) {
  let filter = query.get('project') ?? '';
  let projects = [];
  let instances = [];
  let shownFingerprint;
  const listArea = h('div', { 'aria-busy': 'true' }, h('p', { class: 'muted' }, 'Loading instances…'));
  const filterArea = h('div');
  const createArea = h('div');

  container.append(
    h('div', { class: 'page-head' }, h('div', {}, h('h1', { tabindex: '-1' }, 'Instances'), h('p', {}, 'Each instance is one linked WhatsApp number.'))),
    h('div', { class: 'stack' }, h('section', { class: 'card', 'aria-labelledby': 'list-title' }, h('h2', { id: 'list-title', class: 'visually-hidden' }, 'Instance list'), filterArea, listArea), createArea),
  );

  async function load() {
    const [instanceList, projectList] = await Promise.all([api.get('/api/instances'), api.get('/api/projects')]);
    if (projects.length !== projectList.data.length || filterArea.childElementCount === 0) {
      projects = projectList.data;
      renderFilter();
      renderCreate();
    }
    projects = projectList.data;
    instances = instanceList.data;
    renderList();
  }

  function renderFilter() {
    const select = selectField({
      label: 'Filter by project',
      name: 'project',
      value: filter,
      options: [{ value: '', label: 'All projects' }, { value: NO_PROJECT, label: 'No project' }, ...projects.map((p) => ({ value: p.id, label: p.name }))],
    });
    // Filtered in place, the address updated without a new view: arrow keys step through the
    // options (each one a change) with the focus kept on the list box.
    select.querySelector('select').addEventListener('change', (event) => {
      filter = event.target.value;
      history.replaceState(null, '', filter ? `#/instances?project=${encodeURIComponent(filter)}` : '#/instances');
      renderList();
      renderCreate();
    });
    replaceChildren(filterArea, h('div', { class: 'inline' }, select));
  }

  function renderList() {
    listArea.removeAttribute('aria-busy');
    const shown = instances.filter((i) => !filter || (filter === NO_PROJECT ? !i.projectId : i.projectId === filter));
    const fingerprint = JSON.stringify([filter, shown, projects]);
    if (fingerprint === shownFingerprint) return;
    shownFingerprint = fingerprint;
    if (shown.length === 0) {
      replaceChildren(listArea, instances.length === 0 ? emptyState('No instances yet.', 'Create one below, then connect it by scanning its QR code.') : emptyState('No instances match this project.', 'Choose another project or create an instance in it.'));
      return;
    }
    const projectName = (id) => projects.find((p) => p.id === id)?.name ?? id;
    replaceChildren(
      listArea,
      table({
        caption: 'Instances',
        columns: [
          { label: 'Name', cell: (i) => h('a', { href: `#/instances/${encodeURIComponent(i.id)}` }, i.name) },
          { label: 'State', cell: (i) => badge(i.state) },
          { label: 'Phone', cell: (i) => i.phone ?? '—' },
          { label: 'Project', cell: (i) => (i.projectId ? projectName(i.projectId) : '—') },
          { label: 'Created', cell: (i) => formatDate(i.createdAt) },
        ],
        rows: shown.map((i) => ({ data: i, attrs: { 'data-instance-id': i.id } })),
      }),
    );
  }

  function renderCreate() {
    const createForm = form(
      { class: 'inline', onsubmit: (event) => create(event, createForm) },
      field({ label: 'Name', name: 'name', hint: '2 to 70 characters', attrs: { required: true, maxlength: '70', autocomplete: 'off' } }),
      selectField({ label: 'Project', name: 'projectId', value: filter === NO_PROJECT ? '' : filter, options: [{ value: '', label: 'No project' }, ...projects.map((p) => ({ value: p.id, label: p.name }))] }),
      h('button', { type: 'submit' }, 'Create instance'),
    );
    replaceChildren(createArea, h('section', { class: 'card', 'aria-labelledby': 'create-title' }, h('h2', { id: 'create-title' }, 'Create an instance'), createForm));
  }

  async function create(event, createForm) {
    event.preventDefault();
    const data = new FormData(createForm);
    const created = await submitting(createForm, () => api.post('/api/instances', { name: String(data.get('name')).trim(), projectId: data.get('projectId') || null }));
    if (!created) return;
    notify(`Instance “${created.name}” created. Its QR code appears on its page once its session has started.`);
    navigate(`#/instances/${encodeURIComponent(created.id)}`);
  }

  load().catch((error) => replaceChildren(listArea, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
  return startPolling(load, REFRESH_MS).stop;
}
