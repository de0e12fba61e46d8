/* ddp dashboard: line charts drawn as SVG, no library.
 *
 * DdpChart.draw(container, opts) replaces the container's content with one <svg> chart:
 *   opts.title      text above the plot
 *   opts.points     [{x, y, label}] in x order (x: epoch); each point is a <circle class="pt">
 *   opts.xmax       optional: stretch the x axis to at least this value (planned epochs)
 *   opts.markers    [{x, label}]: vertical dashed lines (a new generation and its reason)
 *   opts.yfmt       function formatting a y value for ticks and tooltips
 *   opts.empty      text shown when there are no points
 * Axes with "nice" ticks (1, 2, 5 x 10^k), tick labels, an x label and a y label are drawn
 * every time; nothing here reads the network or holds state between calls.
 */
'use strict';

(function () {
    var NS = 'http://www.w3.org/2000/svg';

    function svg(tag, attrs, text) {
        var e = document.createElementNS(NS, tag);
        if (attrs) {
            Object.keys(attrs).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
        }
        if (text !== undefined) {
            e.textContent = text;
        }
        return e;
    }

    /* Ticks covering [lo, hi] at a step of 1, 2 or 5 times a power of ten, about `count` of
     * them. Returns {lo, hi, step, ticks} with lo/hi widened to whole steps. */
    function niceTicks(lo, hi, count, integer) {
        if (!isFinite(lo) || !isFinite(hi)) {
            lo = 0;
            hi = 1;
        }
        if (hi < lo) {
            var t = lo;
            lo = hi;
            hi = t;
        }
        if (hi === lo) {
            var pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
            lo -= pad;
            hi += pad;
        }
        var raw = (hi - lo) / Math.max(1, count);
        var mag = Math.pow(10, Math.floor(Math.log10(raw)));
        var step = mag;
        [1, 2, 5, 10].some(function (m) {
            step = m * mag;
            return step >= raw;
        });
        if (integer && step < 1) {
            step = 1;
        }
        var first = Math.floor(lo / step + 1e-9) * step;
        var last = Math.ceil(hi / step - 1e-9) * step;
        var ticks = [];
        for (var v = first, i = 0; v <= last + step * 1e-6 && i < 100; v += step, i++) {
            ticks.push(Math.round(v / step) * step);
        }
        return { lo: first, hi: last, step: step, ticks: ticks };
    }

    function defaultFmt(v) {
        var a = Math.abs(v);
        if (a !== 0 && (a >= 1e6 || a < 1e-3)) {
            return v.toExponential(1);
        }
        if (a >= 1000) {
            return (v / 1000).toFixed(a >= 1e4 ? 0 : 1) + 'k';
        }
        return String(+v.toPrecision(3));
    }

    /* A tick label with just the decimals its step needs (14.2k, 0.25, 3). */
    function tickFmt(v, step) {
        var big = Math.abs(v) >= 1e4 || step >= 1e4;
        var unit = big ? 1000 : 1;
        var dec = Math.max(0, -Math.floor(Math.log10(step / unit) + 1e-9));
        if (step / unit < 1e-4 || Math.abs(v) >= 1e9) {
            return v.toExponential(1);
        }
        return v === 0 ? '0' : (v / unit).toFixed(Math.min(dec, 6)) + (big ? 'k' : '');
    }

    function draw(container, opts) {
        var W = Math.max(280, container.clientWidth || 480);
        var H = 220;
        var m = { l: 56, r: 14, t: 26, b: 38 };
        var pw = W - m.l - m.r;
        var ph = H - m.t - m.b;
        var fmt = opts.yfmt || defaultFmt;
        var pts = opts.points || [];
        var root = svg('svg', {
            'class': 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H,
            role: 'img', 'aria-label': opts.title
        });
        root.appendChild(svg('text', { 'class': 'chart-title', x: m.l, y: 16 }, opts.title));

        var xs = pts.map(function (p) { return p.x; });
        var ys = pts.map(function (p) { return p.y; });
        (opts.markers || []).forEach(function (mk) { xs.push(mk.x); });
        var xlo = Math.min.apply(null, xs.concat([0]));
        var xhi = Math.max.apply(null, xs.concat([opts.xmax || 1, xlo + 1]));
        var xa = niceTicks(xlo, xhi, Math.min(10, Math.max(2, Math.floor(pw / 60))), true);
        xa.lo = Math.min(xa.lo, xlo);
        var ya = niceTicks(Math.min.apply(null, ys.length ? ys : [0]),
                           Math.max.apply(null, ys.length ? ys : [1]), 5, false);
        var sx = function (x) { return m.l + (x - xa.lo) / (xa.hi - xa.lo || 1) * pw; };
        var sy = function (y) { return m.t + ph - (y - ya.lo) / (ya.hi - ya.lo || 1) * ph; };

        /* grid, ticks and tick labels */
        var g = svg('g', { 'class': 'axis' });
        ya.ticks.forEach(function (v) {
            var y = sy(v);
            g.appendChild(svg('line', { 'class': 'grid', x1: m.l, x2: m.l + pw, y1: y, y2: y }));
            g.appendChild(svg('line', { x1: m.l - 4, x2: m.l, y1: y, y2: y }));
            g.appendChild(svg('text', { x: m.l - 7, y: y + 4, 'text-anchor': 'end' },
                              opts.yfmt ? fmt(v) : tickFmt(v, ya.step)));
        });
        xa.ticks.forEach(function (v) {
            var x = sx(v);
            g.appendChild(svg('line', { x1: x, x2: x, y1: m.t + ph, y2: m.t + ph + 4 }));
            g.appendChild(svg('text', { x: x, y: m.t + ph + 16, 'text-anchor': 'middle' },
                              String(v)));
        });
        g.appendChild(svg('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph }));
        g.appendChild(svg('line', { x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph }));
        g.appendChild(svg('text', { 'class': 'axis-label', x: m.l + pw / 2, y: H - 4,
                                    'text-anchor': 'middle' }, opts.xlabel || 'epoch'));
        g.appendChild(svg('text', { 'class': 'axis-label', x: 12, y: m.t + ph / 2,
                                    'text-anchor': 'middle',
                                    transform: 'rotate(-90 12 ' + (m.t + ph / 2) + ')' },
                          opts.ylabel || ''));
        root.appendChild(g);

        /* generation markers: a dashed vertical line and its reason */
        (opts.markers || []).forEach(function (mk, i) {
            var x = sx(mk.x);
            var mg = svg('g', { 'class': 'marker' });
            mg.appendChild(svg('line', { x1: x, x2: x, y1: m.t, y2: m.t + ph }));
            var anchor = x > m.l + pw * 0.6 ? 'end' : 'start';
            /* as much of the reason as fits on that side, at ~5.5 px a character */
            var room = Math.max(12, Math.floor((anchor === 'end' ? x - m.l : m.l + pw - x) / 5.5));
            var label = mk.label.length > room ? mk.label.slice(0, room - 1) + '\u2026'
                : mk.label;
            mg.appendChild(svg('text', { x: x + (anchor === 'end' ? -4 : 4),
                                         y: m.t + 10 + (i % 3) * 12, 'text-anchor': anchor },
                               label));
            mg.appendChild(svg('title', null, mk.label));
            root.appendChild(mg);
        });

        if (!pts.length) {
            root.appendChild(svg('text', { 'class': 'chart-empty', x: m.l + pw / 2,
                                           y: m.t + ph / 2, 'text-anchor': 'middle' },
                                 opts.empty || 'no data yet'));
        } else {
            var d = pts.map(function (p, i) {
                return (i ? 'L' : 'M') + sx(p.x).toFixed(1) + ' ' + sy(p.y).toFixed(1);
            }).join(' ');
            root.appendChild(svg('path', { 'class': 'series', d: d }));
            pts.forEach(function (p) {
                var c = svg('circle', { 'class': 'pt', cx: sx(p.x).toFixed(1),
                                        cy: sy(p.y).toFixed(1), r: 3.5, 'data-x': p.x });
                c.appendChild(svg('title', null, (p.label || ('epoch ' + p.x)) + ': ' + fmt(p.y)));
                root.appendChild(c);
            });
        }
        container.replaceChildren(root);
    }

    window.DdpChart = { draw: draw, niceTicks: niceTicks, fmt: defaultFmt, tickFmt: tickFmt };
})();
