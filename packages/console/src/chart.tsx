/**
 * A bar chart as plain SVG (no chart library: one series of daily values is all the console
 * draws). The numbers are also in the table beside it, so the SVG is described, not read.
 */
export function BarChart({
  label,
  points,
  format,
}: {
  label: string;
  points: { x: string; y: number }[];
  format: (v: number) => string;
}) {
  const width = 600;
  const height = 160;
  const pad = 4;
  const max = Math.max(...points.map((p) => p.y), 0);
  const bw = (width - pad) / Math.max(points.length, 1);
  const total = points.reduce((s, p) => s + p.y, 0);
  return (
    <figure className="chart">
      <figcaption>
        {label}: <strong>{format(total)}</strong> in total, peak {format(max)}
      </figcaption>
      <svg
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        aria-label={`${label} by day`}
        preserveAspectRatio="none"
      >
        <line x1={pad} y1={height - pad} x2={width} y2={height - pad} className="axis" />
        {points.map((p, i) => {
          const h = max > 0 ? ((height - 2 * pad) * p.y) / max : 0;
          return (
            <rect
              key={p.x}
              x={pad + i * bw + bw * 0.15}
              y={height - pad - h}
              width={bw * 0.7}
              height={Math.max(h, p.y > 0 ? 1 : 0)}
              className="bar"
            >
              <title>{`${p.x}: ${format(p.y)}`}</title>
            </rect>
          );
        })}
      </svg>
      <div className="ticks muted">
        <span>{points[0]?.x}</span>
        <span>{points.at(-1)?.x}</span>
      </div>
    </figure>
  );
}
