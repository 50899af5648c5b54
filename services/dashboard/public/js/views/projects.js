// Projects: list (with how many instances each groups), create, rename in place, delete (its
// instances stay, without project) and a link to the instance list filtered by the project.
import { path } from '../api.js';
import { confirmAction, emptyState, field, form, formatDate, h, notify, replaceChildren, submitting, table, withButton } from '../dom.js';

export function render(container, { api }) {
  const listArea = h('div', {}, h('p', { class: 'muted' }, 'Loading projects…'));
  const createForm = form(
    { class: 'inline', onsubmit: (event) => create(event) },
    field({ label: 'Name', name: 'name', hint: '2 to 70 characters', attrs: { maxlength: '70', autocomplete: 'off' } }),
    field({ label: 'Id (optional)', name: 'projectId', hint: 'Lowercase letters, digits and dashes', attrs: { maxlength: '40', autocomplete: 'off', spellcheck: 'false' } }),
    h('button', { type: 'submit' }, 'Create project'),
  );

  container.append(
    h('div', { class: 'page-head' }, h('div', {}, h('h1', { tabindex: '-1' }, 'Projects'), h('p', {}, 'Projects group instances. Deleting one keeps its instances.'))),
    h('div', { class: 'stack' }, h('section', { class: 'card', 'aria-label': 'Project list' }, listArea), h('section', { class: 'card', 'aria-labelledby': 'create-project-title' }, h('h2', { id: 'create-project-title' }, 'Create a project'), createForm)),
  );

  async function load() {
    const [projects, instances] = await Promise.all([api.get('/api/projects'), api.get('/api/instances')]);
    const counts = new Map();
    for (const i of instances.data) if (i.projectId) counts.set(i.projectId, (counts.get(i.projectId) ?? 0) + 1);
    if (projects.data.length === 0) return replaceChildren(listArea, emptyState('No projects yet.', 'Create one to group instances, for example per customer or team.'));
    replaceChildren(
      listArea,
      table({
        caption: 'Projects',
        columns: [
          { label: 'Name', wrap: true, cell: (p) => nameCell(p) },
          { label: 'Id', cell: (p) => h('code', {}, p.id) },
          { label: 'Instances', cell: (p) => h('a', { href: `#/instances?project=${encodeURIComponent(p.id)}` }, `${counts.get(p.id) ?? 0} instance${counts.get(p.id) === 1 ? '' : 's'}`) },
          { label: 'Created', cell: (p) => formatDate(p.createdAt) },
          { label: 'Actions', cell: (p) => h('button', { type: 'button', class: 'secondary small', onclick: (event) => remove(event.currentTarget, p) }, 'Delete', h('span', { class: 'visually-hidden' }, ` ${p.name}`)) },
        ],
        rows: projects.data.map((p) => ({ data: p, attrs: { 'data-project-id': p.id } })),
      }),
    );
  }

  /** The name with a Rename button that swaps in a small form (Escape cancels). */
  function nameCell(project) {
    const cell = h('div');
    const showName = ({ focus = false } = {}) => {
      const renameButton = h('button', { type: 'button', class: 'ghost small', 'data-rename': project.id, onclick: () => showForm() }, 'Rename', h('span', { class: 'visually-hidden' }, ` ${project.name}`));
      replaceChildren(cell, h('span', {}, project.name), ' ', renameButton);
      if (focus) renameButton.focus(); // back where the keyboard user left, not on the page
    };
    const showForm = () => {
      const renameForm = form(
        { class: 'inline', onsubmit: (event) => rename(event, renameForm, project), onkeydown: (event) => event.key === 'Escape' && showName({ focus: true }) },
        field({ label: 'New name', name: 'name', value: project.name, attrs: { maxlength: '70', autocomplete: 'off' } }),
        h('button', { type: 'submit', class: 'small' }, 'Save'),
        h('button', { type: 'button', class: 'ghost small', onclick: () => showName({ focus: true }) }, 'Cancel'),
      );
      replaceChildren(cell, renameForm);
      renameForm.elements.namedItem('name').focus();
    };
    showName();
    return cell;
  }

  async function rename(event, renameForm, project) {
    event.preventDefault();
    const name = String(new FormData(renameForm).get('name')).trim();
    const saved = await submitting(renameForm, () => api.patch(path`/api/projects/${project.id}`, { name }));
    if (!saved) return;
    notify(`Project renamed to “${saved.name}”.`);
    await load();
    listArea.querySelector(`[data-rename="${CSS.escape(project.id)}"]`)?.focus();
  }

  async function create(event) {
    event.preventDefault();
    const data = new FormData(createForm);
    const projectId = String(data.get('projectId')).trim();
    const created = await submitting(createForm, () => api.post('/api/projects', { name: String(data.get('name')).trim(), ...(projectId ? { projectId } : {}) }));
    if (!created) return;
    createForm.reset();
    notify(`Project “${created.name}” created.`);
    await load();
  }

  async function remove(button, project) {
    const ok = await confirmAction(`Delete “${project.name}”? Its instances are kept, without a project.`, { title: 'Delete this project?', confirmLabel: 'Delete' });
    if (!ok) return;
    await withButton(button, async () => {
      await api.delete(path`/api/projects/${project.id}`);
      notify(`Project “${project.name}” deleted.`);
      await load();
    });
  }

  load().catch((error) => replaceChildren(listArea, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
}
