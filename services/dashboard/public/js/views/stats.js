// Statistics: message counts per UTC day and type (GET /api/stats) as a stacked bar chart, with
// filters (dates, project, instance, direction) and the same numbers as a table.
import { emptyState, field, form, h, replaceChildren, selectField, submitting, table } from '../dom.js';
import { stackedBarChart, typeClass } from './chart.js';

const DAY_MS = 86_400_000;
const DEFAULT_DAYS = 14;
const utcDay = (date) => date.toISOString().slice(0, 10);

export function render(container, { api }) {
  const today = new Date();
  const filtersArea = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const resultArea = h('div', { 'aria-live': 'polite' });

  container.append(
    h('div', { class: 'page-head' }, h('div', {}, h('h1', { tabindex: '-1' }, 'Statistics'), h('p', {}, 'Messages per day (UTC) and type.'))),
    h('div', { class: 'stack' }, h('section', { class: 'card', 'aria-label': 'Filters' }, filtersArea), h('section', { class: 'card', 'aria-label': 'Results' }, resultArea)),
  );

  async function setUp() {
    const [projects, instances] = await Promise.all([api.get('/api/projects'), api.get('/api/instances')]);
    const filtersForm = form(
      { class: 'inline', onsubmit: (event) => (event.preventDefault(), load(filtersForm)) },
      field({ label: 'From', name: 'from', type: 'date', value: utcDay(new Date(today.getTime() - (DEFAULT_DAYS - 1) * DAY_MS)) }),
      field({ label: 'To', name: 'to', type: 'date', value: utcDay(today) }),
      selectField({ label: 'Project', name: 'projectId', options: [{ value: '', label: 'All projects' }, ...projects.data.map((p) => ({ value: p.id, label: p.name }))] }),
      selectField({ label: 'Instance', name: 'instanceId', options: [{ value: '', label: 'All instances' }, ...instances.data.map((i) => ({ value: i.id, label: i.name }))] }),
      selectField({ label: 'Direction', name: 'direction', options: [{ value: '', label: 'Both' }, { value: 'outbound', label: 'Outbound' }, { value: 'inbound', label: 'Inbound' }] }),
      h('button', { type: 'submit' }, 'Show'),
    );
    replaceChildren(filtersArea, filtersForm);
    await load(filtersForm);
  }

  async function load(filtersForm) {
    const data = new FormData(filtersForm);
    const query = new URLSearchParams();
    for (const name of ['from', 'to', 'projectId', 'instanceId']) if (data.get(name)) query.set(name, String(data.get(name)));
    const stats = await submitting(filtersForm, () => api.get(`/api/stats?${query}`));
    if (stats) showResult(stats, String(data.get('direction') ?? ''));
  }

  function showResult(stats, direction) {
    const rows = stats.rows.filter((r) => !direction || r.direction === direction);
    const total = rows.reduce((sum, r) => sum + r.count, 0);
    if (total === 0) return replaceChildren(resultArea, emptyState('No messages in this period.', 'Change the dates or filters, or send a message first.'));
    const days = daysBetween(stats.from, stats.to);
    const types = [...new Set(rows.map((r) => r.type))].sort();
    const counts = new Map();
    for (const r of rows) counts.set(`${r.date}|${r.type}`, (counts.get(`${r.date}|${r.type}`) ?? 0) + r.count);
    const count = (day, type) => counts.get(`${day}|${type}`) ?? 0;
    replaceChildren(
      resultArea,
      h('p', {}, h('strong', {}, String(total)), ` message${total === 1 ? '' : 's'} from ${stats.from} to ${stats.to}.`),
      stackedBarChart(days, types, count, `Messages per day from ${stats.from} to ${stats.to}, ${total} in total, stacked by type.`),
      h('ul', { class: 'legend', 'aria-label': 'Message types' }, types.map((t) => h('li', {}, h('span', { class: `swatch ${typeClass(t)}`, 'aria-hidden': 'true' }), t))),
      h(
        'details',
        {},
        h('summary', {}, 'Show the numbers'),
        table({
          caption: 'Messages per day, direction and type',
          columns: [
            { label: 'Date', cell: (r) => r.date },
            { label: 'Direction', cell: (r) => r.direction },
            { label: 'Type', cell: (r) => r.type },
            { label: 'Count', cell: (r) => String(r.count) },
          ],
          rows: rows.map((r) => ({ data: r })),
        }),
      ),
    );
  }

  setUp().catch((error) => replaceChildren(filtersArea, h('p', { class: 'form-error', role: 'alert' }, error.detail)));
}

function daysBetween(from, to) {
  const days = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += DAY_MS) days.push(utcDay(new Date(t)));
  return days;
}
