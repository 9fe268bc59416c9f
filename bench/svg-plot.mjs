// A line plot as a standalone SVG: a few series of (x, y) points on shared axes, a legend, an
// optional log scale for y. Enough for the benchmarks' plots under docs/, with no dependency.

const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b'];
const W = 640;
const H = 380;
const M = { left: 70, right: 170, top: 40, bottom: 50 };

const xmlText = (text) =>
  String(text).replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c]);

/** Round ticks over [low, high]: about five. */
function ticks(low, high) {
  const span = high - low || 1;
  const step = 10 ** Math.floor(Math.log10(span / 5));
  const unit = [1, 2, 5, 10].map((k) => k * step).find((k) => span / k <= 6) ?? step * 10;
  const out = [];
  for (let t = Math.ceil(low / unit) * unit; t <= high + 1e-9; t += unit) out.push(Number(t.toPrecision(12)));
  return out;
}

/**
 * @param {{ title: string, x: string, y: string, series: { name: string, points: [number, number][] }[], logY?: boolean }} plot
 * @returns {string} the SVG document
 */
export function linePlot({ title, x, y, series, logY = false }) {
  const points = series.flatMap((s) => s.points);
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]).filter((v) => !logY || v > 0);
  const xLow = Math.min(...xs);
  const xHigh = Math.max(...xs);
  const fy = logY ? (v) => Math.log10(Math.max(v, 1e-9)) : (v) => v;
  const yLow = logY ? Math.floor(fy(Math.min(...ys))) : 0;
  const yHigh = logY ? Math.ceil(fy(Math.max(...ys))) : Math.max(...ys) * 1.05 || 1;
  const px = (v) => M.left + ((v - xLow) / (xHigh - xLow || 1)) * (W - M.left - M.right);
  const py = (v) => H - M.bottom - ((fy(v) - yLow) / (yHigh - yLow || 1)) * (H - M.top - M.bottom);
  const yTicks = logY ? Array.from({ length: yHigh - yLow + 1 }, (_, i) => 10 ** (yLow + i)) : ticks(0, yHigh);
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${M.left}" y="22" font-size="14" font-weight="bold">${xmlText(title)}</text>`,
    `<line x1="${M.left}" y1="${H - M.bottom}" x2="${W - M.right}" y2="${H - M.bottom}" stroke="#333"/>`,
    `<line x1="${M.left}" y1="${M.top}" x2="${M.left}" y2="${H - M.bottom}" stroke="#333"/>`,
    ...xs
      .filter((v, i) => xs.indexOf(v) === i)
      .map(
        (v) =>
          `<text x="${px(v)}" y="${H - M.bottom + 16}" text-anchor="middle">${v}</text><line x1="${px(v)}" y1="${H - M.bottom}" x2="${px(v)}" y2="${H - M.bottom + 4}" stroke="#333"/>`,
      ),
    ...yTicks.map(
      (v) =>
        `<text x="${M.left - 6}" y="${py(v) + 4}" text-anchor="end">${v.toLocaleString('en')}</text><line x1="${M.left}" y1="${py(v)}" x2="${W - M.right}" y2="${py(v)}" stroke="#ddd"/>`,
    ),
    `<text x="${(M.left + W - M.right) / 2}" y="${H - 12}" text-anchor="middle">${xmlText(x)}</text>`,
    `<text x="16" y="${(M.top + H - M.bottom) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(M.top + H - M.bottom) / 2})">${xmlText(y)}${logY ? ' (log)' : ''}</text>`,
  ];
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const path = s.points
      .filter((p) => !logY || p[1] > 0)
      .map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`)
      .join(' ');
    parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${path}"/>`);
    for (const p of s.points)
      parts.push(`<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="3" fill="${color}"/>`);
    const ly = M.top + 10 + i * 18;
    parts.push(
      `<line x1="${W - M.right + 12}" y1="${ly}" x2="${W - M.right + 32}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
    );
    parts.push(`<text x="${W - M.right + 38}" y="${ly + 4}">${xmlText(s.name)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
