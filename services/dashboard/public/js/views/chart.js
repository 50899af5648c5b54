// A stacked bar chart in SVG: one bar per day, one segment per message type. Pure drawing; the
// colours come from the stylesheet (class type-<type>), so the CSP needs no inline styles.
const SVG_NS = 'http://www.w3.org/2000/svg';
const KNOWN_TYPES = new Set(['text', 'image', 'audio', 'video', 'document', 'sticker']);
const SIZE = { width: 760, height: 260, left: 40, right: 8, top: 12, bottom: 34 };

export const typeClass = (type) => `type-${KNOWN_TYPES.has(type) ? type : 'other'}`;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

/** A round upper bound for the axis (1, 2, 5 × 10^n) so the grid lines land on simple numbers. */
function niceMax(value) {
  if (value <= 4) return 4;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 5, 10].find((s) => s * magnitude >= value / 4) * magnitude;
  return step * 4;
}

/**
 * @param {string[]} days  YYYY-MM-DD, in order
 * @param {string[]} types the stacking order
 * @param {(day: string, type: string) => number} count
 */
export function stackedBarChart(days, types, count, label) {
  const plotWidth = SIZE.width - SIZE.left - SIZE.right;
  const plotHeight = SIZE.height - SIZE.top - SIZE.bottom;
  const totals = days.map((d) => types.reduce((sum, t) => sum + count(d, t), 0));
  const max = niceMax(Math.max(0, ...totals));
  const slot = plotWidth / Math.max(1, days.length);
  const barWidth = Math.max(2, Math.min(36, slot * 0.7));
  const y = (v) => SIZE.top + plotHeight - (v / max) * plotHeight;

  const chart = svg('svg', { viewBox: `0 0 ${SIZE.width} ${SIZE.height}`, class: 'chart', role: 'img', 'aria-label': label });
  for (let i = 0; i <= 4; i++) {
    const value = (max / 4) * i;
    chart.append(svg('line', { class: i === 0 ? 'axis' : 'grid-line', x1: SIZE.left, x2: SIZE.width - SIZE.right, y1: y(value), y2: y(value) }));
    chart.append(svg('text', { x: SIZE.left - 6, y: y(value) + 4, 'text-anchor': 'end' }, String(value)));
  }
  const labelEvery = Math.ceil(days.length / 10);
  days.forEach((day, i) => {
    const x = SIZE.left + slot * i + (slot - barWidth) / 2;
    let base = 0;
    for (const type of types) {
      const value = count(day, type);
      if (!value) continue;
      const rect = svg('rect', { class: typeClass(type), x, width: barWidth, y: y(base + value), height: Math.max(1, y(base) - y(base + value)) }, svg('title', {}, `${day}: ${value} ${type}`));
      chart.append(rect);
      base += value;
    }
    if (i % labelEvery === 0) chart.append(svg('text', { x: x + barWidth / 2, y: SIZE.height - SIZE.bottom + 16, 'text-anchor': 'middle' }, day.slice(5)));
  });
  return chart;
}
