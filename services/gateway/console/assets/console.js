/* activity-gateway console: error messages for htmx calls, the live tail (server-sent events) and the charts (Chart.js). */
(function () {
  'use strict'

  function flash(message, kind) {
    var el = document.getElementById('flash')
    if (!el) return
    el.textContent = message
    el.className = 'flash' + (kind === 'info' ? ' info' : '')
    el.hidden = false
    clearTimeout(flash.timer)
    flash.timer = setTimeout(function () { el.hidden = true }, 8000)
  }

  /** A Problem's detail (console API errors are v2 Problems), or the status line. */
  function problemText(xhr) {
    try {
      var p = JSON.parse(xhr.responseText)
      // invalid-request names each problem in errors[].message; its detail is generic.
      if (p.errors && p.errors.length) return p.errors.map(function (e) { return e.message }).join(' · ')
      return p.detail || p.title || ('HTTP ' + xhr.status)
    } catch {
      return 'HTTP ' + xhr.status + ' ' + (xhr.statusText || '')
    }
  }

  document.addEventListener('htmx:responseError', function (e) { flash(problemText(e.detail.xhr)) })
  document.addEventListener('htmx:sendError', function () { flash('The gateway could not be reached.') })
  document.addEventListener('htmx:afterRequest', function (e) {
    var msg = e.detail.successful && e.detail.xhr && e.detail.xhr.getResponseHeader('x-console-message')
    if (msg) flash(decodeURIComponent(msg), 'info')
    var form = e.detail.elt
    if (e.detail.successful && form && form.hasAttribute && form.hasAttribute('data-reset-on-success')) form.reset()
  })

  function cell(row, text, cls) {
    var td = document.createElement('td')
    td.textContent = text == null ? '' : String(text)
    if (cls) td.className = cls
    row.appendChild(td)
    return td
  }

  function startTail(box) {
    var body = box.querySelector('tbody')
    var state = document.querySelector('[data-tail-state]')
    var detailBase = box.getAttribute('data-detail-base')
    var source = new EventSource(box.getAttribute('data-tail-src'))
    source.addEventListener('open', function () { if (state) state.textContent = 'connected' })
    source.addEventListener('error', function () { if (state) state.textContent = 'reconnecting…' })
    source.addEventListener('attempt', function (ev) {
      var a = JSON.parse(ev.data)
      var tr = document.createElement('tr')
      tr.className = 'new'
      tr.setAttribute('data-delivery', a.delivery_id)
      cell(tr, new Date(a.at).toLocaleTimeString())
      var link = document.createElement('a')
      link.href = detailBase + encodeURIComponent(a.delivery_id)
      link.textContent = a.delivery_id
      cell(tr, '').appendChild(link)
      cell(tr, a.event_type || '')
      cell(tr, a.outcome, a.outcome === 'delivered' ? 'ok' : 'bad')
      cell(tr, a.status == null ? (a.error || '') : a.status)
      cell(tr, a.ms + ' ms', 'hide-narrow')
      body.insertBefore(tr, body.firstChild)
      while (body.children.length > 200) body.removeChild(body.lastChild)
    })
  }

  function lineChart(canvas, labels, sets, yTitle, max) {
    return new Chart(canvas, {
      type: 'line',
      data: { labels: labels, datasets: sets },
      options: {
        animation: false, maintainAspectRatio: false, spanGaps: true,
        interaction: { mode: 'index', intersect: false },
        scales: { y: { beginAtZero: true, max: max, title: { display: true, text: yTitle } }, x: { ticks: { maxTicksLimit: 8 } } },
        plugins: { legend: { position: 'bottom' } }
      }
    })
  }

  var charts = []
  function drawCharts(box) {
    fetch(box.getAttribute('data-chart-src'), { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json() })
      .then(function (s) {
        charts.forEach(function (c) { c.destroy() })
        var labels = s.points.map(function (p) { return new Date(p.t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) })
        var col = function (k) { return s.points.map(function (p) { return p[k] }) }
        box.setAttribute('data-total', String(s.total))
        charts = [
          lineChart(box.querySelector('[data-chart=rate]'), labels, [{ label: 'deliveries / min', data: col('per_minute'), borderColor: '#1d6fd6', pointRadius: 0 }], 'per minute'),
          lineChart(box.querySelector('[data-chart=success]'), labels, [{ label: 'success rate %', data: col('success_pct'), borderColor: '#16803c', pointRadius: 0 }], '%', 100),
          lineChart(box.querySelector('[data-chart=latency]'), labels, [
            { label: 'p50 ms', data: col('p50_ms'), borderColor: '#7a4fd6', pointRadius: 0 },
            { label: 'p99 ms', data: col('p99_ms'), borderColor: '#c22b2b', pointRadius: 0 }
          ], 'ms')
        ]
        box.setAttribute('data-ready', 'true')
      })
      .catch(function (err) { flash('Charts: ' + err.message) })
  }

  function barChart(box) {
    var data = JSON.parse(box.getAttribute('data-bar-chart'))
    new Chart(box.querySelector('canvas'), {
      type: 'bar',
      data: { labels: data.labels, datasets: [{ label: 'messages behind', data: data.values, backgroundColor: '#1d6fd6' }] },
      options: { animation: false, maintainAspectRatio: false, indexAxis: 'y', scales: { x: { beginAtZero: true } }, plugins: { legend: { display: false } } }
    })
    box.setAttribute('data-ready', 'true')
  }

  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('[data-bar-chart]').forEach(barChart)
    document.querySelectorAll('[data-tail-src]').forEach(startTail)
    document.querySelectorAll('[data-chart-src]').forEach(drawCharts)
  })
})()
