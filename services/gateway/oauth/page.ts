import { createHash } from 'node:crypto'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import type { AccessLevel } from '../../common/auth/records'

/**
 * The HTML of the browser steps of the OAuth flows: the sign-in and consent
 * page, the PIN page of out-of-band clients and short notices. Self-contained
 * (no external assets, no script), served with a strict Content Security
 * Policy whose only allowance is the page's own stylesheet, by hash.
 *
 * `renderConsentPage` takes everything a flow needs to vary (app name,
 * permissions, the form's hidden fields and action), so the OAuth 2.0
 * authorization-code flow renders the same page with its own fields.
 */

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string)
}

const STYLE = `
:root{color-scheme:light dark;--bg:#eef2f6;--card:#fff;--text:#0f1419;--muted:#4b5a68;--line:#cfd9de;--accent:#1d4ed8;--accent-hover:#1e3a8a;--on-accent:#fff;--focus:#1d4ed8;--bad-bg:#fdecec;--bad:#a1140f;--ok:#0f7b3f}
@media (prefers-color-scheme:dark){:root{--bg:#0b0f14;--card:#16202a;--text:#e7e9ea;--muted:#9aa7b3;--line:#38444d;--accent:#7aa7ff;--accent-hover:#a9c5ff;--on-accent:#0b0f14;--focus:#a9c5ff;--bad-bg:#3b1518;--bad:#ffb4ab;--ok:#7ee2a8}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;padding:32px 16px;background:var(--bg);color:var(--text);font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{width:100%;max-width:460px;background:var(--card);border:1px solid var(--line);border-radius:18px;padding:32px;box-shadow:0 10px 30px rgba(15,20,25,.08)}
.brand{display:flex;align-items:center;gap:10px;margin:0 0 28px;color:var(--muted);font-size:14px;font-weight:600;letter-spacing:.02em}
.mark{width:30px;height:30px;border-radius:8px;background:var(--accent);color:var(--on-accent);display:grid;place-items:center;font-weight:800}
.app{display:flex;align-items:center;gap:14px;margin:0 0 8px}
.badge{flex:none;width:52px;height:52px;border-radius:14px;background:var(--text);color:var(--card);display:grid;place-items:center;font-size:22px;font-weight:800}
h1{font-size:22px;line-height:1.3;margin:0}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:26px 0 6px}
p{margin:12px 0 0}
ul{list-style:none;margin:0;padding:0}
li{position:relative;padding:9px 0 9px 30px;border-bottom:1px solid var(--line)}
li:last-child{border-bottom:0}
li::before{position:absolute;left:4px;top:9px;font-weight:800}
.can li::before{content:"\\2713";color:var(--ok)}
.cannot li::before{content:"\\2715";color:var(--muted)}
.account{display:flex;align-items:center;justify-content:space-between;gap:12px;flex-wrap:wrap;margin:24px 0 0;padding:12px 14px;border:1px solid var(--line);border-radius:10px}
label{display:block;margin:18px 0 6px;font-size:14px;font-weight:600}
input[type=text],input[type=password]{width:100%;padding:12px 14px;border:1px solid var(--line);border-radius:10px;background:transparent;color:var(--text);font:inherit}
input[type=text]:hover,input[type=password]:hover{border-color:var(--muted)}
.actions{display:flex;flex-wrap:wrap;gap:12px;margin-top:26px}
button{flex:1 1 150px;padding:12px 18px;white-space:nowrap;border:1px solid transparent;border-radius:999px;font:inherit;font-weight:700;cursor:pointer}
.primary{background:var(--accent);color:var(--on-accent)}
.primary:hover{background:var(--accent-hover)}
.secondary{background:transparent;color:var(--text);border-color:var(--line)}
.secondary:hover{border-color:var(--muted)}
a{color:var(--accent);text-underline-offset:2px}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
input:focus-visible{outline-offset:0;border-color:var(--focus)}
.alert{margin:20px 0 0;padding:12px 14px;border-radius:10px;background:var(--bad-bg);color:var(--bad);font-weight:600}
.pin{margin:22px 0 6px;padding:18px;border:2px dashed var(--line);border-radius:14px;text-align:center;font:800 38px/1.2 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;letter-spacing:.18em;user-select:all}
.fine{margin-top:24px;color:var(--muted);font-size:13px}
.apps>li{padding:14px 0;display:flex;flex-wrap:wrap;align-items:center;justify-content:space-between;gap:10px}
.apps>li::before{content:none}
.apps h2{margin:0;font-size:17px;text-transform:none;letter-spacing:0;color:var(--text)}
.apps form{flex:none}
.apps button{flex:none}
@media (max-width:480px){main{padding:24px 20px;border-radius:14px}}
`

const STYLE_HASH = `sha256-${createHash('sha256').update(STYLE).digest('base64')}`

/** What an access level lets an app do, in the words shown to the user. */
export function permissionsFor(level: AccessLevel): { can: string[]; cannot: string[] } {
  const can = ['Read posts, lists and profile information of your account, including who you follow.']
  const cannot = ['See your password.']
  if (level === 'read-write' || level === 'read-write-dm') {
    can.push('Create and delete posts, and follow or unfollow accounts for you.', 'Manage advertising accounts and webhooks you have access to.')
  } else {
    cannot.push('Post, follow or change anything on your behalf.')
  }
  if (level === 'read-write-dm') can.push('Read, send and delete your direct messages.')
  else cannot.push('Access your direct messages.')
  return { can, cannot }
}

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<meta name="robots" content="noindex">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<p class="brand" aria-hidden="true"><span class="mark">A</span> Activity Gateway</p>
${body}
</main>
</body>
</html>
`
}

function hidden(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([k, v]) => `<input type="hidden" name="${escapeHtml(k)}" value="${escapeHtml(v)}">`)
    .join('\n')
}

function list(className: string, items: string[], labelledBy: string): string {
  return `<ul class="${className}" aria-labelledby="${labelledBy}">${items.map((i) => `<li>${escapeHtml(i)}</li>`).join('')}</ul>`
}

export interface ConsentPage {
  appName: string
  /** What the app will be able to do. */
  permissions: string[]
  /** What it will not be able to do (reassurance). */
  restrictions?: string[]
  /** Form action (relative, so the page works behind a path-prefixing proxy). */
  action: string
  hiddenFields: Record<string, string>
  /** Screen name of the browser's signed-in account; absent: the page asks for credentials. */
  signedInAs?: string
  /** Link that signs in as someone else (e.g. the same page with force_login=true). */
  switchAccountHref?: string
  /** Prefills the username box. */
  screenName?: string
  /** Shown in an alert above the buttons (wrong password, too many attempts...). */
  error?: string
  /** Link (relative to the page) to the page where the user revokes apps' access: connected-apps.ts. */
  manageHref: string
}

/** The sign-in and consent page of the OAuth flows. */
export function renderConsentPage(page: ConsentPage): string {
  const name = escapeHtml(page.appName)
  const initial = escapeHtml((page.appName.trim()[0] ?? '?').toUpperCase())
  const credentials =
    page.signedInAs !== undefined
      ? `<div class="account"><span>Signed in as <strong>@${escapeHtml(page.signedInAs)}</strong></span>${
          page.switchAccountHref ? `<a href="${escapeHtml(page.switchAccountHref)}">Use another account</a>` : ''
        }</div>`
      : `<label for="screen_name">Username</label>
<input type="text" id="screen_name" name="screen_name" autocomplete="username" autocapitalize="none" spellcheck="false" required maxlength="16" value="${escapeHtml(page.screenName ?? '')}"${page.screenName ? '' : ' autofocus'}>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required maxlength="1024"${page.screenName ? ' autofocus' : ''}>`
  const alert = page.error ? `<p class="alert" role="alert" id="form-error">${escapeHtml(page.error)}</p>` : ''
  const body = `<div class="app"><span class="badge" aria-hidden="true">${initial}</span><h1>Authorize <span id="app-name">${name}</span> to access your account?</h1></div>
<h2 id="can">This application will be able to</h2>
${list('can', page.permissions, 'can')}
${page.restrictions && page.restrictions.length > 0 ? `<h2 id="cannot">It will not be able to</h2>\n${list('cannot', page.restrictions, 'cannot')}` : ''}
<form method="post" action="${escapeHtml(page.action)}"${page.error ? ' aria-describedby="form-error"' : ''}>
${hidden(page.hiddenFields)}
${credentials}
${alert}
<div class="actions">
<button type="submit" class="primary" name="decision" value="allow" id="allow">Authorize app</button>
<button type="submit" class="secondary" name="decision" value="deny" id="deny" formnovalidate>Cancel</button>
</div>
</form>
<p class="fine">You will be sent back to ${name}. You can revoke its access at any time on <a href="${escapeHtml(page.manageHref)}">your connected apps page</a>; it never sees your password.</p>`
  return layout(`Authorize ${page.appName}`, body)
}

/** The page out-of-band (`oob`) clients send their users to: shows the PIN to type into the app. */
export function renderPinPage(appName: string, pin: string): string {
  const name = escapeHtml(appName)
  return layout(
    `Your PIN for ${appName}`,
    `<h1>You authorized ${name}</h1>
<p id="pin-help">Go back to ${name} and enter this PIN to finish signing in:</p>
<p class="pin" id="oauth_pin" aria-describedby="pin-help"><code>${escapeHtml(pin)}</code></p>
<p class="fine">The PIN works once and expires soon. If you did not start this, you can close this page: nothing happens without the PIN.</p>`
  )
}

/** The sign-in form of the connected apps page (the consent page's box, without an app asking). */
export function renderAccountSignInPage(page: { csrf: string; screenName?: string; error?: string }): string {
  const alert = page.error ? `<p class="alert" role="alert" id="form-error">${escapeHtml(page.error)}</p>` : ''
  return layout(
    'Sign in to manage your connected apps',
    `<h1>Sign in to manage your connected apps</h1>
<form method="post" action="apps"${page.error ? ' aria-describedby="form-error"' : ''}>
${hidden({ csrf_token: page.csrf })}
<label for="screen_name">Username</label>
<input type="text" id="screen_name" name="screen_name" autocomplete="username" autocapitalize="none" spellcheck="false" required maxlength="16" value="${escapeHtml(page.screenName ?? '')}"${page.screenName ? '' : ' autofocus'}>
<label for="password">Password</label>
<input type="password" id="password" name="password" autocomplete="current-password" required maxlength="1024"${page.screenName ? ' autofocus' : ''}>
${alert}
<div class="actions"><button type="submit" class="primary" id="sign-in">Sign in</button></div>
</form>`
  )
}

export interface ConnectedApp {
  id: string
  name: string
  /** What the user allowed, in words. */
  access: string[]
}

/** The apps the signed-in user authorized, each with a button that revokes its access. */
export function renderConnectedAppsPage(page: { screenName: string; apps: ConnectedApp[]; csrf: string }): string {
  const items = page.apps.map((app, i) => {
    const heading = `app-${i}`
    return `<li><div><h2 id="${heading}">${escapeHtml(app.name)}</h2>${list('can', app.access, heading)}</div>
<form method="post" action="apps">${hidden({ csrf_token: page.csrf, app_id: app.id, decision: 'revoke' })}<button type="submit" class="secondary" aria-describedby="${heading}">Revoke access</button></form></li>`
  })
  const body =
    page.apps.length === 0
      ? '<p id="no-apps">No application has access to your account.</p>'
      : `<ul class="apps" aria-label="Connected apps">${items.join('\n')}</ul>`
  return layout(
    'Connected apps',
    `<h1>Connected apps</h1>
<div class="account"><span>Signed in as <strong>@${escapeHtml(page.screenName)}</strong></span></div>
<p>These applications can use your account. Revoking an application's access invalidates its tokens: it has to ask you again.</p>
${body}`
  )
}

/** A short message page (expired request, denied access, bad form). */
export function renderNoticePage(title: string, message: string): string {
  return layout(title, `<h1>${escapeHtml(title)}</h1>\n<p>${escapeHtml(message)}</p>`)
}

/** CSP source for a redirect target after a form post (Chrome applies form-action to redirects). */
function formActionSource(url: string): string | undefined {
  try {
    const u = new URL(url)
    if (u.protocol === 'http:' || u.protocol === 'https:') return u.origin
    return u.protocol
  } catch {
    return undefined
  }
}

/**
 * Sends a page with its security headers. `redirectTargets` are the URLs a
 * form on the page may end up redirecting to (the app's callback).
 */
export function sendPage(reply: FastifyReply, status: number, html: string, redirectTargets: string[] = []): FastifyReply {
  const formAction = ["'self'", ...redirectTargets.map(formActionSource).filter((s): s is string => s !== undefined)].join(' ')
  return reply
    .code(status)
    .header('content-security-policy', `default-src 'none'; style-src '${STYLE_HASH}'; form-action ${formAction}; frame-ancestors 'none'; base-uri 'none'`)
    .header('x-frame-options', 'DENY')
    .header('x-content-type-options', 'nosniff')
    // same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on the form post, which the CSRF check refuses.
    .header('referrer-policy', 'same-origin')
    .header('cache-control', 'no-store')
    .type('text/html; charset=utf-8')
    .send(html)
}

/**
 * The error handler of the sign-in pages' form posts. A body fastify cannot
 * take (malformed encoding, too large, another content type) fails before
 * the handler runs; a person in a browser gets a notice page for it, not the
 * classic interface's JSON.
 */
export function formErrorPage(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500
  if (status === 500) {
    request.log.error({ err, reqId: request.id }, 'sign-in form failed')
    return sendPage(reply, 500, renderNoticePage('Something went wrong', 'The form could not be processed. Go back to the application and try again.'))
  }
  return sendPage(reply, status, renderNoticePage('Unexpected request', 'The form could not be read. Use the form on the sign-in page.'))
}
