/* ddp dashboard: a one-page app over the REST API of docs/api.md.
 *
 * Views (by the URL fragment, so reloads and the back button work):
 *   #/jobs[?state=S]   the jobs table, one page at a time (page_size/page_token)
 *   #/jobs/<id>        one job: charts per epoch, generations, events, rank layout, live log
 *   #/nodes            the nodes table
 *
 * Invariants:
 * - The user token lives in sessionStorage only (this tab, this session). It travels in the
 *   Authorization header of fetch() calls, never in a URL, never in the DOM, never in the
 *   console. A 401/403 answer forgets it and asks again.
 * - One poll loop: the current view's poll() runs, then the next one is scheduled POLL_MS
 *   later, so two polls never overlap. A route change bumps `epoch`; answers that arrive for
 *   an older view are dropped.
 * - Every text that comes from the server goes in through textContent (no innerHTML), so a
 *   job name or a log line cannot inject markup.
 * - Bounded: one page of jobs, at most LOG_KEEP log lines and one chart per metric in the DOM.
 *
 * Why one file of ~950 lines: the three views share one closure (the poll loop, the route
 * epoch, the API helper and the token) and index.html's CSP allows only our own scripts, with
 * no module loader; the chart drawing, which shares nothing, is apart (chart.js). A fourth
 * view is the point to split the views into files of their own over a small shared object.
 */
'use strict';

(function () {
    var TOKEN_KEY = 'ddp.userToken';
    var POLL_MS = 1000;
    var HIDDEN_POLL_MS = 5000;
    var LOG_KEEP = 2000;
    var LOG_TAIL = 1000;
    var LOG_FETCH = 5000;
    var LOG_FETCHES_PER_TICK = 4;
    var STATES = ['PENDING', 'RUNNING', 'RESTARTING', 'CANCELLING', 'SUCCEEDED', 'FAILED',
                  'CANCELLED'];
    var LIVE = { PENDING: 1, RUNNING: 1, RESTARTING: 1 };
    var seesAll = true; /* the token may list every user's jobs; false after a 403 */

    var $ = function (id) { return document.getElementById(id); };
    var view = null;        /* the mounted view: {poll(), unmount()} */
    var epoch = 0;          /* bumped on each route change */
    var timer = null;
    var inflight = false;   /* a poll is running */
    var again = false;      /* poll again as soon as it ends */
    var skewMs = 0;         /* server clock minus ours, from the Date header */
    var lastOk = 0;

    /* -- DOM helpers --------------------------------------------------------------------- */

    /* el('td', {class: 'x', onclick: f}, child, 'text', ...): children may be nodes, strings,
     * numbers, null (skipped) or arrays of those. */
    function el(tag, attrs) {
        var e = document.createElement(tag);
        Object.keys(attrs || {}).forEach(function (k) {
            var v = attrs[k];
            if (v === null || v === undefined || v === false) {
                return;
            }
            if (k.slice(0, 2) === 'on') {
                e.addEventListener(k.slice(2), v);
            } else if (k === 'class') {
                e.className = v;
            } else {
                e.setAttribute(k, v === true ? '' : String(v));
            }
        });
        for (var i = 2; i < arguments.length; i++) {
            append(e, arguments[i]);
        }
        return e;
    }

    function append(e, c) {
        if (c === null || c === undefined || c === false) {
            return;
        }
        if (Array.isArray(c)) {
            c.forEach(function (x) { append(e, x); });
        } else if (typeof c === 'object') {
            e.appendChild(c);
        } else {
            e.appendChild(document.createTextNode(String(c)));
        }
    }

    function badge(state) {
        return el('span', { 'class': 'state st-' + state }, state);
    }

    function ago(ms) {
        if (ms === null || ms === undefined || !isFinite(ms)) {
            return '\u2013';
        }
        var s = Math.max(0, ms / 1000);
        if (s < 10) {
            return s.toFixed(1) + ' s';
        }
        if (s < 120) {
            return Math.round(s) + ' s';
        }
        if (s < 7200) {
            return Math.round(s / 60) + ' min';
        }
        if (s < 172800) {
            return Math.round(s / 3600) + ' h';
        }
        return Math.round(s / 86400) + ' d';
    }

    function since(iso) {
        var t = iso ? Date.parse(iso) : NaN;
        return isFinite(t) ? Date.now() + skewMs - t : null;
    }

    function num(v, digits) {
        if (typeof v !== 'number' || !isFinite(v)) {
            return '\u2013';
        }
        return String(+v.toPrecision(digits || 4));
    }

    function shortTime(iso) {
        var t = iso ? new Date(iso) : null;
        if (!t || !isFinite(t.getTime())) {
            return '\u2013';
        }
        return t.toLocaleTimeString([], { hour12: false }) + '.' +
            String(t.getMilliseconds()).padStart(3, '0');
    }

    function fullTime(iso) {
        var t = iso ? new Date(iso) : null;
        return t && isFinite(t.getTime()) ? t.toLocaleString([], { hour12: false }) : '\u2013';
    }

    /* -- API ----------------------------------------------------------------------------- */

    function ApiError(status, code, message) {
        this.status = status;
        this.code = code;
        this.message = message;
    }

    function token() {
        try {
            return sessionStorage.getItem(TOKEN_KEY);
        } catch (e) {
            return null;
        }
    }

    /* Calls the API with the user token; resolves to the decoded JSON answer, rejects with an
     * ApiError (status 0 when ddpd could not be reached). */
    function api(method, path, body) {
        var tok = token();
        if (!tok) {
            showLogin('');
            return Promise.reject(new ApiError(401, 'UNAUTHENTICATED', 'no token'));
        }
        var headers = { 'Authorization': 'Bearer ' + tok, 'Accept': 'application/json' };
        var init = { method: method, headers: headers, cache: 'no-store', credentials: 'omit' };
        if (body !== undefined) {
            headers['Content-Type'] = 'application/json';
            init.body = JSON.stringify(body);
        }
        return fetch(path, init).then(function (r) {
            var date = Date.parse(r.headers.get('Date') || '');
            if (isFinite(date)) {
                /* the Date header has a resolution of one second: ignore smaller skews */
                var s = date - Date.now();
                skewMs = Math.abs(s) > 1500 ? s : 0;
            }
            return r.text().then(function (text) {
                var data = null;
                try {
                    data = text ? JSON.parse(text) : null;
                } catch (e) {
                    data = null;
                }
                if (r.ok) {
                    return data;
                }
                var err = (data && data.error) || {};
                var ae = new ApiError(r.status, err.status || '', err.message || r.statusText);
                /* 401, or 403 for a token that is no user's (the bootstrap token, a node
                 * credential): ask for another. A role's 403 (a viewer cancelling, a user
                 * listing all) keeps the token; the caller shows the message. */
                if (r.status === 401 ||
                    (r.status === 403 && /bootstrap|credential of node/.test(ae.message))) {
                    forgetToken();
                    showLogin('The token was refused (' + r.status + ' ' + ae.code + ').');
                }
                throw ae;
            });
        }, function (e) {
            throw new ApiError(0, 'UNAVAILABLE', 'cannot reach ddpd: ' + e.message);
        });
    }

    /* Why a job waits, short (the jobs table): "Resources #2"; null when it does not. */
    function pendingText(j) {
        if (!j.pending) {
            return null;
        }
        return el('span', { 'class': 'muted pending' }, ' ' + j.pending.reason +
                  (j.pending.position ? ' #' + j.pending.position : ''));
    }

    function forgetToken() {
        seesAll = true;
        try {
            sessionStorage.removeItem(TOKEN_KEY);
        } catch (e) { /* storage disabled: nothing kept */ }
        $('logout').hidden = true;
    }

    /* -- login, confirmation, banner ------------------------------------------------------ */

    function showLogin(message) {
        $('login').hidden = false;
        $('login-error').textContent = message || '';
        $('login-error').hidden = !message;
        $('token').value = '';
        $('token').focus();
    }

    function onLoginSubmit(ev) {
        ev.preventDefault();
        var t = $('token').value.trim();
        $('token').value = '';
        if (!t) {
            showLogin('Paste the token first.');
            return;
        }
        try {
            sessionStorage.setItem(TOKEN_KEY, t);
        } catch (e) {
            showLogin('This browser refuses session storage; the dashboard needs it.');
            return;
        }
        $('login').hidden = true;
        $('logout').hidden = false;
        route();
    }

    var confirmAction = null;

    function askConfirm(text, yesLabel, action) {
        $('confirm-text').textContent = text;
        $('confirm-yes').textContent = yesLabel;
        confirmAction = action;
        $('confirm').hidden = false;
        $('confirm-no').focus();
    }

    function closeConfirm(yes) {
        var a = confirmAction;
        confirmAction = null;
        $('confirm').hidden = true;
        if (yes && a) {
            a();
        }
    }

    function banner(text) {
        $('banner').textContent = text || '';
        $('banner').hidden = !text;
    }

    function cancelJob(job) {
        askConfirm('Cancel job ' + job.id + ' (' + job.name + ', ' + job.state + ')? ' +
                   'Its workers get SIGTERM, then SIGKILL after ' +
                   ((job.spec && job.spec.grace_period_s) || 0) + ' s.', 'Cancel job',
                   function () {
                       api('POST', '/v1/jobs/' + encodeURIComponent(job.id) + ':cancel', {})
                           .then(function () { banner(''); kick(); },
                                 function (e) { banner('cancel ' + job.id + ': ' + e.message); });
                   });
    }

    /* -- poll loop ----------------------------------------------------------------------- */

    function schedule(ms) {
        clearTimeout(timer);
        timer = setTimeout(tick, ms);
    }

    function kick() {
        schedule(0);
    }

    /* One poll at a time: a tick that finds a poll in flight only asks for another one
     * right after it (so a kick during a poll never makes two polls read the same log
     * lines). */
    function tick() {
        timer = null;
        if (inflight) {
            again = true;
            return;
        }
        if (!view || !token()) {
            return;
        }
        inflight = true;
        var my = epoch;
        var p;
        try {
            p = Promise.resolve(view.poll());
        } catch (e) {
            p = Promise.reject(e);
        }
        p.then(function () {
            if (my !== epoch) {
                return;
            }
            lastOk = Date.now();
            banner('');
            $('conn').className = 'conn ok';
        }, function (e) {
            if (my !== epoch) {
                return;
            }
            $('conn').className = 'conn bad';
            if (e && e.status !== 401 && e.status !== 403) {
                banner(e.message || String(e));
            }
        }).then(function () {
            inflight = false;
            if (!token()) {
                return;
            }
            if (again || my !== epoch) {
                again = false;
                schedule(0);
            } else if (timer === null) {
                schedule(document.hidden ? HIDDEN_POLL_MS : POLL_MS);
            }
        });
    }

    setInterval(function () {
        $('conn').textContent = lastOk ? 'updated ' + ago(Date.now() - lastOk) + ' ago' : '';
    }, 500);

    /* -- jobs table ---------------------------------------------------------------------- */

    /* "MIN:MAX" as stored, shortened to "N" when MIN == MAX. */
    function nnodesText(spec) {
        var v = String(spec.nnodes === undefined ? '?' : spec.nnodes);
        var p = v.split(':');
        return p.length === 2 && p[0] === p[1] ? p[0] : v;
    }

    function jobShape(j) {
        var spec = j.spec || {};
        var n = j.nodes && j.nodes.length ? j.nodes.length : nnodesText(spec);
        return n + ' \u00d7 ' + (spec.nproc_per_node || 1);
    }

    function epochText(m) {
        if (!m || typeof m.epoch !== 'number') {
            return '\u2013';
        }
        return m.epoch + (typeof m.epochs === 'number' ? '/' + m.epochs : '');
    }

    function jobsView(root, params) {
        var state = STATES.indexOf(params.state) >= 0 ? params.state : '';
        var pageSize = [25, 50, 100, 200].indexOf(+params.page_size) >= 0 ? +params.page_size : 50;
        var tokens = [''];      /* page_token of page i; tokens[0] is the first page */
        var page = 0;
        var next = '';

        var filter = el('select', { id: 'state-filter', 'aria-label': 'state filter',
                                    onchange: function () { go({ state: filter.value }); } },
                        el('option', { value: '' }, 'all states'),
                        STATES.map(function (s) { return el('option', { value: s }, s); }));
        filter.value = state;
        var sizeSel = el('select', { id: 'page-size', 'aria-label': 'page size',
                                     onchange: function () { go({ page_size: sizeSel.value }); } },
                         [25, 50, 100, 200].map(function (n) {
                             return el('option', { value: n }, n + ' a page');
                         }));
        sizeSel.value = String(pageSize);
        var prev = el('button', { id: 'prev-page', type: 'button', 'class': 'secondary',
                                  onclick: function () { if (page > 0) { page--; kick(); } } },
                      '\u2190 Newer');
        var nextBtn = el('button', { id: 'next-page', type: 'button', 'class': 'secondary',
                                     onclick: function () {
                                         if (next) {
                                             tokens[page + 1] = next;
                                             page++;
                                             kick();
                                         }
                                     } }, 'Older \u2192');
        var pageInfo = el('span', { id: 'page-info', 'class': 'muted' });
        var tbody = el('tbody');
        var table = el('table', { id: 'jobs', 'class': 'grid-table' },
                       el('thead', null, el('tr', null,
                           ['id', 'name', 'owner', 'state', 'nodes \u00d7 procs', 'gen',
                            'restarts', 'epoch', 'last loss', 'age', ''].map(function (h, i) {
                               return el('th', { 'class': i >= 5 && i <= 9 ? 'n' : null }, h);
                           }))),
                       tbody);
        root.replaceChildren(
            el('div', { 'class': 'toolbar' }, el('h1', null, 'Jobs'), filter, sizeSel,
               el('span', { 'class': 'spacer' }), pageInfo, prev, nextBtn),
            table);

        function go(change) {
            var p = { state: state, page_size: pageSize };
            Object.keys(change).forEach(function (k) { p[k] = change[k]; });
            var q = Object.keys(p).filter(function (k) { return p[k]; }).map(function (k) {
                return k + '=' + encodeURIComponent(p[k]);
            }).join('&');
            location.hash = '#/jobs' + (q ? '?' + q : '');
        }

        /* Rows are kept between polls: a row is rebuilt only when its job changed, and the
         * table's children are replaced only when the ids or their order changed, so a click
         * in progress is not lost to a refresh. The age cell is updated in place. */
        var rows = {};          /* id -> {sig, tr, age} */
        var order = '';

        function render(jobs) {
            var kept = {};
            var trs = jobs.map(function (j) {
                var sig = JSON.stringify(j);
                var r = rows[j.id];
                if (!r || r.sig !== sig) {
                    r = { sig: sig, tr: row(j) };
                    r.age = r.tr.querySelector('td.age');
                } else {
                    r.age.textContent = ago(since(j.created_at));
                }
                kept[j.id] = r;
                return r.tr;
            });
            var ids = jobs.map(function (j) { return j.id; }).join(' ');
            var changed = trs.some(function (tr, i) { return tbody.children[i] !== tr; });
            rows = kept;
            if (changed || ids !== order || tbody.children.length !== trs.length) {
                tbody.replaceChildren.apply(tbody, trs);
            }
            order = ids;
        }

        function row(j) {
            var m = j.last_metrics || null;
            return el('tr', { 'data-id': j.id },
                el('td', null, el('a', { href: '#/jobs/' + encodeURIComponent(j.id) }, j.id)),
                el('td', { 'class': 'name' }, j.name),
                el('td', { 'class': 'owner' }, j.owner || ''),
                el('td', { title: (j.pending ? j.pending.message + '; ' : '') + (j.reason || '') },
                   badge(j.state), pendingText(j)),
                el('td', null, jobShape(j)),
                el('td', { 'class': 'n' }, j.generation),
                el('td', { 'class': 'n' }, j.restarts),
                el('td', { 'class': 'n' }, epochText(m)),
                el('td', { 'class': 'n' }, m ? num(m.loss) : '\u2013'),
                el('td', { 'class': 'n age', title: fullTime(j.created_at) },
                   ago(since(j.created_at))),
                el('td', null, LIVE[j.state] ? el('button', {
                    type: 'button', 'class': 'danger small cancel', 'data-id': j.id,
                    onclick: function () { cancelJob(j); } }, 'Cancel') : null));
        }

        return {
            poll: function () {
                /* every user's jobs for the roles that see them (admin, viewer); a user's
                 * token is refused all=true (403) and then lists its own */
                var q = '?page_size=' + pageSize + (state ? '&state=' + state : '') +
                    (tokens[page] ? '&page_token=' + encodeURIComponent(tokens[page]) : '') +
                    (seesAll ? '&all=true' : '');
                return api('GET', '/v1/jobs' + q).catch(function (e) {
                    if (seesAll && e.status === 403) {
                        seesAll = false;
                        return api('GET', '/v1/jobs' + q.replace('&all=true', ''));
                    }
                    throw e;
                }).then(function (d) {
                    var jobs = (d && d.jobs) || [];
                    next = (d && d.next_page_token) || '';
                    if (jobs.length) {
                        render(jobs);
                    } else {
                        rows = {};
                        order = '';
                        tbody.replaceChildren(el('tr', null, el('td', {
                            colspan: 11, 'class': 'muted empty' }, page ? 'no more jobs' :
                            'no jobs' + (state ? ' in state ' + state : ''))));
                    }
                    prev.disabled = page === 0;
                    nextBtn.disabled = !next;
                    pageInfo.textContent = 'page ' + (page + 1) + ' \u00b7 ' + jobs.length +
                        ' jobs';
                });
            },
            unmount: function () {}
        };
    }

    /* -- job page ------------------------------------------------------------------------ */

    /* One point per epoch for metric `key` (a fractional epoch for the reports a language
     * model makes between epochs): a later report of the same epoch (a generation that re-ran
     * it) replaces the earlier one. */
    function series(metrics, key) {
        var byEpoch = {};
        metrics.forEach(function (r) {
            var m = r.metric || {};
            /* epoch_progress: a report between epochs (a language model's), as a fraction */
            var x = typeof m.epoch_progress === 'number' ? m.epoch_progress : m.epoch;
            if (typeof x === 'number' && typeof m[key] === 'number' && isFinite(m[key])) {
                byEpoch[x] = { x: x, y: m[key],
                               label: 'epoch ' + x + ' (gen ' + r.generation + ')' };
            }
        });
        return Object.keys(byEpoch).map(function (k) { return byEpoch[k]; })
            .sort(function (a, b) { return a.x - b.x; });
    }

    /* A vertical line where each generation after the first began, labelled with why: the
     * reason of the last RESTARTING event before it, else of its own first event. The line
     * sits half an epoch before that generation's first reported epoch (or after the last
     * epoch reported so far, when it reported none yet). */
    function generationMarkers(events, metrics) {
        var firstEpoch = {};
        var maxEpoch = 0;
        metrics.forEach(function (r) {
            var e = r.metric && r.metric.epoch;
            if (typeof e !== 'number') {
                return;
            }
            if (!(r.generation in firstEpoch) || e < firstEpoch[r.generation]) {
                firstEpoch[r.generation] = e;
            }
            maxEpoch = Math.max(maxEpoch, e);
        });
        var out = [];
        var seen = {};
        var lastRestart = '';
        events.forEach(function (ev) {
            if (ev.state === 'RESTARTING') {
                lastRestart = ev.reason || '';
            }
            var g = ev.generation;
            if (typeof g !== 'number' || g < 2 || seen[g]) {
                return;
            }
            if (ev.state !== 'RUNNING' && !(g in firstEpoch)) {
                return;
            }
            seen[g] = true;
            var x = g in firstEpoch ? firstEpoch[g] - 0.5 : maxEpoch + 0.5;
            out.push({ x: Math.max(0.5, x),
                       label: 'gen ' + g + ': ' + (lastRestart || ev.reason || '') });
            lastRestart = '';
        });
        return maxEpoch ? out : [];
    }

    function jobView(root, id) {
        var job = null;
        var events = [];
        var metrics = [];
        var evSeq = 0;
        var mSeq = 0;
        var chartSig = '';
        var logRank = 0;
        var logNext = 0;
        var logLines = 0;
        var logGen = null;
        var logTailed = false; /* the rank's last LOG_TAIL lines were read; now follow */
        var logTailFull = false; /* ... and there were older ones, not shown */
        var ranksSig = '';

        var head = el('div', { 'class': 'toolbar' });
        var summary = el('dl', { id: 'job-summary', 'class': 'summary' });
        var charts = {
            loss: el('div', { id: 'chart-loss', 'class': 'chart-box' }),
            acc: el('div', { id: 'chart-acc', 'class': 'chart-box' }),
            tput: el('div', { id: 'chart-tput', 'class': 'chart-box' })
        };
        var layout = el('div', { id: 'rank-layout', 'class': 'layout' });
        var evList = el('ol', { id: 'events', 'class': 'timeline' });
        var rankSel = el('select', { id: 'log-rank', 'aria-label': 'log rank',
                                     onchange: function () { setLogRank(+rankSel.value); } });
        var follow = el('input', { id: 'log-follow', type: 'checkbox', checked: true });
        var logInfo = el('span', { id: 'log-info', 'class': 'muted' });
        var logPre = el('pre', { id: 'log', 'class': 'log' });

        root.replaceChildren(
            head, summary,
            el('section', { 'class': 'charts' }, charts.loss, charts.acc, charts.tput),
            el('div', { 'class': 'cols' },
               el('section', null, el('h2', null, 'Rank layout'), layout),
               el('section', null, el('h2', null, 'Events'), evList)),
            el('section', null,
               el('div', { 'class': 'toolbar' }, el('h2', null, 'Log'),
                  el('label', null, 'rank ', rankSel),
                  el('label', null, follow, ' follow the end'),
                  el('span', { 'class': 'spacer' }), logInfo),
               logPre));

        function setLogRank(r) {
            if (r === logRank) {
                return;
            }
            logRank = r;
            logNext = 0;
            logLines = 0;
            logGen = null;
            logTailed = false;
            logTailFull = false;
            logPre.replaceChildren();
            rankSel.value = String(r);
            markRank();
            kick();
        }

        function markRank() {
            layout.querySelectorAll('.rank').forEach(function (b) {
                b.classList.toggle('sel', +b.getAttribute('data-rank') === logRank);
            });
        }

        var headSig = '';

        function drawHead() {
            var sig = JSON.stringify(job);
            if (sig === headSig) {
                return;
            }
            headSig = sig;
            head.replaceChildren();
            append(head, [
                el('h1', null, job.id + ' ', el('span', { 'class': 'muted' }, job.name)),
                badge(job.state),
                el('span', { id: 'job-reason', 'class': 'reason' }, job.reason || ''),
                job.pending ? el('span', { id: 'job-pending', 'class': 'reason muted' },
                                 'waits: ' + job.pending.reason +
                                 (job.pending.position ? ' (#' + job.pending.position +
                                  ' in the queue)' : '') + ', ' + job.pending.message) : null,
                el('span', { 'class': 'spacer' }),
                LIVE[job.state] ? el('button', { id: 'job-cancel', type: 'button',
                                                 'class': 'danger',
                                                 onclick: function () { cancelJob(job); } },
                                     'Cancel job') : null]);
            var spec = job.spec || {};
            var m = job.last_metrics || {};
            var items = [
                ['nodes \u00d7 procs', jobShape(job) + '  (nnodes ' + nnodesText(spec) + ')'],
                ['world size', job.world_size || '\u2013'],
                ['generation', job.generation],
                ['restarts', job.restarts + ' of ' + (spec.max_restarts === undefined ? '?'
                                                      : spec.max_restarts)],
                ['master', job.master_addr ? job.master_addr + ':' + job.master_port : '\u2013'],
                ['epoch', epochText(job.last_metrics)],
                ['loss', num(m.loss)],
                ['test accuracy', num(m.test_acc)],
                ['samples/s', num(m.samples_per_s, 5)],
                ['created', fullTime(job.created_at)],
                ['started', fullTime(job.started_at)],
                ['finished', fullTime(job.finished_at)],
                ['command', (spec.command || []).join(' ')]
            ];
            summary.replaceChildren.apply(summary, items.map(function (kv) {
                return el('div', { 'class': kv[0] === 'command' ? 'wide' : null },
                          el('dt', null, kv[0]), el('dd', null, kv[1]));
            }));
        }

        function drawLayout() {
            var sig = JSON.stringify([job.generation, job.nodes, job.world_size]);
            if (sig === ranksSig) {
                return;
            }
            ranksSig = sig;
            var nodes = (job.nodes || []).slice().sort(function (a, b) {
                return a.group_rank - b.group_rank;
            });
            layout.replaceChildren.apply(layout, nodes.length ? nodes.map(function (n) {
                return el('div', { 'class': 'node-box' },
                    el('div', { 'class': 'node-name' }, n.name,
                       el('span', { 'class': 'muted' }, ' group rank ' + n.group_rank)),
                    el('div', { 'class': 'ranks' }, (n.ranks || []).map(function (r) {
                        return el('button', { type: 'button', 'class': 'rank', 'data-rank': r,
                                              title: 'show the log of rank ' + r,
                                              onclick: function () { setLogRank(r); } },
                                  'rank ' + r);
                    })));
            }) : [el('p', { 'class': 'muted' }, 'not placed yet')]);
            var ws = Math.max(job.world_size || 0, 1);
            var opts = [];
            for (var r = 0; r < ws && r < 1024; r++) {
                opts.push(el('option', { value: r }, String(r)));
            }
            rankSel.replaceChildren.apply(rankSel, opts);
            rankSel.value = String(logRank);
            markRank();
        }

        function drawEvents(fresh) {
            fresh.forEach(function (ev) {
                evList.appendChild(el('li', null,
                    el('time', { title: fullTime(ev.time) }, shortTime(ev.time)),
                    el('span', { 'class': 'gen' }, 'gen ' + ev.generation),
                    badge(ev.state),
                    el('span', { 'class': 'reason' }, ev.reason || '')));
            });
        }

        function drawCharts(force) {
            var lm = job && job.last_metrics;
            var sig = mSeq + '/' + evSeq + '/' + (lm && lm.epochs) + '/' +
                charts.loss.clientWidth;
            if (sig === chartSig && !force) {
                return;
            }
            chartSig = sig;
            var markers = generationMarkers(events, metrics);
            var xmax = lm && typeof lm.epochs === 'number' ? lm.epochs : 0;
            DdpChart.draw(charts.loss, { title: 'Training loss', ylabel: 'loss',
                                         points: series(metrics, 'loss'), markers: markers,
                                         xmax: xmax });
            /* A language model (ddp-worker's GPT) reports a validation loss and tokens/s,
             * at fractional epochs (every --eval-every steps): its second and third charts. */
            var lang = lm && 'val_loss' in lm; /* null once it diverged: still a language model */
            DdpChart.draw(charts.acc, lang
                ? { title: 'Validation loss (nats/byte)', ylabel: 'val loss',
                    points: series(metrics, 'val_loss'), markers: markers, xmax: xmax }
                : { title: 'Test accuracy', ylabel: 'accuracy',
                    points: series(metrics, 'test_acc'), markers: markers, xmax: xmax });
            DdpChart.draw(charts.tput, { title: 'Throughput',
                                         ylabel: lang ? 'tokens/s' : 'samples/s',
                                         points: series(metrics, lang ? 'tokens_per_s'
                                                                     : 'samples_per_s'),
                                         markers: markers, xmax: xmax });
        }

        /* Scrolling up stops following the end; scrolling back down resumes it. */
        logPre.addEventListener('scroll', function () {
            follow.checked = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
        });
        follow.addEventListener('change', function () {
            if (follow.checked) {
                logPre.scrollTop = logPre.scrollHeight;
            }
        });

        function appendLog(lines) {
            var frag = document.createDocumentFragment();
            lines.forEach(function (l) {
                if (l.generation !== logGen) {
                    logGen = l.generation;
                    frag.appendChild(el('div', { 'class': 'log-gen' },
                                        '\u2500\u2500 generation ' + l.generation + ' \u2500\u2500'));
                    logLines++;
                }
                frag.appendChild(el('div', { 'class': 'log-line', 'data-seq': l.seq }, l.text));
                logLines++;
            });
            logPre.appendChild(frag);
            while (logLines > LOG_KEEP && logPre.firstChild) {
                logPre.removeChild(logPre.firstChild);
                logLines--;
            }
            if (follow.checked) {
                logPre.scrollTop = logPre.scrollHeight;
            }
        }

        function showLogInfo(rank, d) {
            logInfo.textContent = 'rank ' + rank + ' \u00b7 next seq ' + logNext +
                (logTailFull ? ' \u00b7 the last ' + LOG_TAIL + ' lines on opening, ' +
                               'older ones with ddpctl logs' : '') +
                (d.dropped ? ' \u00b7 ' + d.dropped + ' older lines dropped' : '');
        }

        /* Reads the rank's lines. First its last LOG_TAIL lines in one answer (`tail`),
         * however long the log; then, from that answer's `next`, its new lines: up to
         * LOG_FETCHES_PER_TICK pages of LOG_FETCH a poll, so a burst catches up over a few
         * polls instead of one huge answer; only the last LOG_KEEP lines of what came are
         * put in the page. */
        function pollLog(my, rank, left, got) {
            var base = '/v1/jobs/' + encodeURIComponent(id) + '/logs?rank=' + rank;
            if (!logTailed) {
                return api('GET', base + '&tail=' + LOG_TAIL).then(function (d) {
                    if (my !== epoch || rank !== logRank || logTailed) {
                        return null;
                    }
                    d = d || {};
                    var lines = d.lines || [];
                    logTailed = true;
                    logTailFull = lines.length >= LOG_TAIL;
                    if (typeof d.next === 'number') {
                        logNext = Math.max(logNext, d.next);
                    }
                    showLogInfo(rank, d);
                    if (lines.length) {
                        appendLog(lines);
                    }
                    return null;
                });
            }
            got = got || [];
            var q = base + '&after=' + logNext + '&limit=' + LOG_FETCH;
            return api('GET', q).then(function (d) {
                if (my !== epoch || rank !== logRank || !logTailed) {
                    return null;
                }
                d = d || {};
                var lines = d.lines || [];
                got = got.concat(lines).slice(-LOG_KEEP);
                if (typeof d.next === 'number') {
                    logNext = Math.max(logNext, d.next);
                }
                showLogInfo(rank, d);
                if (lines.length >= LOG_FETCH && left > 1) {
                    return pollLog(my, rank, left - 1, got);
                }
                if (got.length) {
                    appendLog(got);
                }
                return null;
            });
        }

        var onResize = function () { if (job) { drawCharts(true); } };
        window.addEventListener('resize', onResize);

        return {
            poll: function () {
                var my = epoch;
                var base = '/v1/jobs/' + encodeURIComponent(id);
                return api('GET', base).then(function (j) {
                    if (my !== epoch) {
                        return null;
                    }
                    job = j;
                    drawHead();
                    drawLayout();
                    return Promise.all([
                        api('GET', base + '/events?after=' + evSeq),
                        api('GET', base + '/metrics?after=' + mSeq),
                        pollLog(my, logRank, LOG_FETCHES_PER_TICK)
                    ]).then(function (r) {
                        if (my !== epoch) {
                            return;
                        }
                        var fresh = ((r[0] && r[0].events) || []).filter(function (e) {
                            return e.seq > evSeq;
                        });
                        fresh.forEach(function (e) { evSeq = Math.max(evSeq, e.seq); });
                        events = events.concat(fresh);
                        drawEvents(fresh);
                        var fm = ((r[1] && r[1].metrics) || []).filter(function (m) {
                            return m.seq > mSeq;
                        });
                        fm.forEach(function (m) { mSeq = Math.max(mSeq, m.seq); });
                        metrics = metrics.concat(fm);
                        if (metrics.length > 20000) {
                            metrics = metrics.slice(-10000);
                        }
                        drawCharts(false);
                    });
                }, function (e) {
                    if (e.status === 404) {
                        head.replaceChildren(el('h1', null, 'Job ' + id + ' not found'));
                    }
                    throw e;
                });
            },
            unmount: function () { window.removeEventListener('resize', onResize); }
        };
    }

    /* -- nodes table --------------------------------------------------------------------- */

    function nodesView(root) {
        var tbody = el('tbody');
        var info = el('span', { id: 'nodes-info', 'class': 'muted' });
        root.replaceChildren(
            el('div', { 'class': 'toolbar' }, el('h1', null, 'Nodes'),
               el('span', { 'class': 'spacer' }), info),
            el('table', { id: 'nodes', 'class': 'grid-table' },
               el('thead', null, el('tr', null,
                   ['name', 'address', 'slots used / free', 'state', 'last heartbeat',
                    'port range', 'registered'].map(function (h) { return el('th', null, h); }))),
               tbody));

        function row(n) {
            var used = n.slots_used || 0;
            var slots = n.slots || 0;
            var bar = el('span', { 'class': 'bar' });
            var fill = el('span', { 'class': 'bar-fill' });
            fill.style.width = (slots ? Math.min(100, 100 * used / slots) : 0) + '%';
            bar.appendChild(fill);
            var age = typeof n.last_heartbeat_age_ms === 'number' ? n.last_heartbeat_age_ms
                : since(n.last_heartbeat);
            return el('tr', { 'data-name': n.name },
                el('td', { 'class': 'name' }, n.name),
                el('td', null, n.address),
                el('td', null, bar, ' ' + used + ' / ' + Math.max(0, slots - used)),
                el('td', null, badge(n.state)),
                el('td', { 'class': 'n', title: fullTime(n.last_heartbeat) }, ago(age) + ' ago'),
                el('td', null, n.port_range || ''),
                el('td', { title: fullTime(n.registered_at) }, ago(since(n.registered_at)) +
                   ' ago'));
        }

        return {
            poll: function () {
                return api('GET', '/v1/nodes').then(function (d) {
                    var nodes = ((d && d.nodes) || []).slice().sort(function (a, b) {
                        return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
                    });
                    var ready = nodes.filter(function (n) { return n.state === 'READY'; });
                    var free = ready.reduce(function (s, n) {
                        return s + Math.max(0, (n.slots || 0) - (n.slots_used || 0));
                    }, 0);
                    info.textContent = nodes.length + ' nodes \u00b7 ' + ready.length +
                        ' ready \u00b7 ' + free + ' free slots';
                    tbody.replaceChildren.apply(tbody, nodes.length ? nodes.map(row) :
                        [el('tr', null, el('td', { colspan: 7, 'class': 'muted empty' },
                                           'no node registered'))]);
                });
            },
            unmount: function () {}
        };
    }

    /* -- router -------------------------------------------------------------------------- */

    function parseHash() {
        var h = location.hash.replace(/^#\/?/, '');
        var qi = h.indexOf('?');
        var path = qi >= 0 ? h.slice(0, qi) : h;
        var params = {};
        if (qi >= 0) {
            h.slice(qi + 1).split('&').forEach(function (kv) {
                var i = kv.indexOf('=');
                if (i > 0) {
                    params[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
                }
            });
        }
        return { parts: path.split('/').filter(Boolean), params: params };
    }

    function route() {
        epoch++;
        clearTimeout(timer);
        timer = null;
        if (view) {
            view.unmount();
            view = null;
        }
        banner('');
        closeConfirm(false);
        var r = parseHash();
        var root = $('view');
        var section = r.parts[0] || 'jobs';
        $('nav-jobs').className = section === 'jobs' ? 'active' : '';
        $('nav-nodes').className = section === 'nodes' ? 'active' : '';
        if (section === 'nodes') {
            document.title = 'Nodes \u00b7 ddp';
            view = nodesView(root);
        } else if (section === 'jobs' && r.parts[1]) {
            document.title = r.parts[1] + ' \u00b7 ddp';
            view = jobView(root, decodeURIComponent(r.parts[1]));
        } else {
            document.title = 'Jobs \u00b7 ddp';
            view = jobsView(root, r.params);
        }
        if (!token()) {
            showLogin('');
            return;
        }
        $('logout').hidden = false;
        kick();
    }

    $('login-form').addEventListener('submit', onLoginSubmit);
    $('confirm-no').addEventListener('click', function () { closeConfirm(false); });
    $('confirm-yes').addEventListener('click', function () { closeConfirm(true); });
    $('logout').addEventListener('click', function () {
        forgetToken();
        clearTimeout(timer);
        showLogin('');
    });
    document.addEventListener('keydown', function (ev) {
        if (ev.key === 'Escape' && !$('confirm').hidden) {
            closeConfirm(false);
        }
    });
    document.addEventListener('visibilitychange', function () {
        if (!document.hidden && view && token()) {
            kick();
        }
    });
    window.addEventListener('hashchange', route);
    route();
})();
