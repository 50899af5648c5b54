// The operator dashboard end to end, in real headless Chromium against the embedded server in
// sandbox mode: sign-in, projects, an instance from creation through QR pairing to a read
// message, keys, the webhook editor with API validation messages, an exhausted delivery that is
// retried, statistics, and the main pages at desktop and phone width (screenshots saved to
// test-results/dashboard/).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freePort, startTestServer, type TestServer } from '../support/server.ts';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver.ts';
import { eventually } from '../support/http.ts';

const CHROMIUM = '/usr/bin/chromium';
const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-results', 'dashboard');
const UI_TIMEOUT_MS = 10_000;

describe('dashboard end to end (headless Chromium)', function () {
  this.timeout(90_000);
  let server: TestServer;
  let receiver: HttpsReceiver;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const pageProblems: string[] = [];

  before(async function () {
    // A missing browser fails the suite rather than skipping it: `make test` installs it.
    assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run \`make system-deps\` (apt-get install -y chromium) and retry`);
    mkdirSync(SCREENSHOTS, { recursive: true });
    receiver = await startHttpsReceiver(() => ({ status: 500 }));
    // The page must be opened from PUBLIC_BASE_URL's origin, or the origin guard refuses its requests.
    const port = await freePort();
    server = await startTestServer({
      storage: 'postgres', // a fresh real PostgreSQL database: much faster to set up than PGlite
      env: {
        PORT: String(port),
        PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
        WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
        WEBHOOK_RETRY_SCHEDULE: '0,20,20,20,20,20,20,20',
        PAIRING_CODE_INTERVAL_MS: '1000', // an instance pairs twice in a test
      },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });

  // On a failure, what the pages showed: a screenshot each and their alert texts (the API's
  // problem details the dashboard displays), so a failing step says what the page saw.
  afterEach(async function () {
    if (this.currentTest?.state !== 'failed') return;
    for (const [i, context] of contexts.entries()) {
      for (const [j, page] of context.pages().entries()) {
        await page.screenshot({ path: join(SCREENSHOTS, `failed-${i}-${j}.png`), fullPage: true }).catch(() => {});
        const alerts = await page.locator('[role="alert"], .form-error, .field-error').allTextContents().catch(() => []);
        console.log(`dashboard page ${i}-${j} at ${page.url()}: ${alerts.join(' | ') || 'no alert shown'}`);
      }
    }
  });

  after(async () => {
    for (const context of contexts) await context.close().catch(() => {});
    await browser?.close();
    await server?.stop();
    await receiver?.close();
  });

  async function openPage(width: number, height: number): Promise<Page> {
    const context = await browser.newContext({ viewport: { width, height } });
    contexts.push(context);
    const page = await context.newPage();
    page.setDefaultTimeout(UI_TIMEOUT_MS);
    page.on('pageerror', (err) => pageProblems.push(`page error: ${err.message}`));
    page.on('console', (msg) => {
      // Failed API calls (the 4xx this test provokes) are logged by Chromium as resource errors.
      if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) pageProblems.push(`console: ${msg.text()}`);
    });
    return page;
  }

  const navLink = (page: Page, name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name });
  const shot = (page: Page, name: string) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });

  async function signIn(page: Page, key: string) {
    await page.goto(`${server.url}/ui`);
    await page.getByLabel('Administrative key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  it('serves /ui through the gateway with its security headers', async () => {
    const res = await fetch(`${server.url}/ui/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-security-policy') ?? '', /script-src 'self'/);
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
    const missing = await fetch(`${server.url}/ui/nope.js`);
    assert.equal(missing.status, 404);
    assert.equal(missing.headers.get('content-type'), 'application/problem+json');
  });

  it('runs an instance from creation to a read message and a retried webhook delivery', async () => {
    const page = await openPage(1280, 900);

    // Sign-in: a wrong key is explained next to the field; the right one is kept in session storage only.
    await signIn(page, 'not-the-key');
    await page.getByText('This key was not accepted').waitFor();
    assert.equal(await page.getByText(/HTTP 401/).count(), 0, 'the form says what failed, not a status code');
    await shot(page, 'sign-in-1280');
    await page.getByLabel('Administrative key').fill(server.adminKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Instances', level: 1 }).waitFor();
    await page.getByText('No instances yet.').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('switchboard.adminKey')), server.adminKey);
    assert.equal(await page.evaluate(() => localStorage.length), 0);

    // Projects: create one; an invalid name shows the API's field message.
    await navLink(page, 'Projects').click();
    await page.getByText('No projects yet.').waitFor();
    await page.getByLabel('Name').fill('S');
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.locator('.field-error').first().waitFor();
    await page.getByLabel('Name').fill('Support team');
    await page.getByLabel('Id (optional)').fill('support');
    await page.getByRole('button', { name: 'Create project' }).click();
    await page.locator('tr[data-project-id="support"]').waitFor();
    await shot(page, 'projects-1280');

    // Create an instance in the project; the dashboard opens it.
    await navLink(page, 'Instances').click();
    // The Projects page has a "Name" field too: fill only once the Instances page has replaced it.
    await page.getByRole('heading', { name: 'Create an instance' }).waitFor();
    await page.getByLabel('Name').fill('Front desk');
    await page.getByLabel('Project', { exact: true }).selectOption('support');
    await page.getByRole('button', { name: 'Create instance' }).click();
    await page.getByRole('heading', { name: 'Front desk', level: 1 }).waitFor();
    const instanceId = decodeURIComponent(new URL(page.url()).hash.split('/')[2]);
    assert.ok(instanceId);

    // The session starts with the instance: the QR code appears as an image; the sandbox scan
    // connects the instance.
    const qr = page.getByRole('img', { name: /QR code/ });
    await qr.waitFor();
    assert.match((await qr.getAttribute('src')) ?? '', /^data:image\/png;base64,/);
    await shot(page, 'instance-qr-1280');
    const scan = await server.admin.post(`/sandbox/instances/${instanceId}/scan`, { phone: '5511988887777' });
    assert.equal(scan.status, 200, scan.text);
    await page.locator('.instance-state [data-status="connected"]').waitFor();
    await page.getByText('Connected as +5511988887777.').waitFor();
    assert.equal(await qr.isVisible(), false);
    await shot(page, 'instance-connected-1280');

    // Access: credentials on demand, an integration key shown once and then revoked.
    await page.getByRole('link', { name: 'Access' }).click();
    await page.getByRole('button', { name: 'Reveal credentials' }).click();
    const credentials = await server.admin.get(`/api/instances/${instanceId}/credentials`);
    assert.equal(await page.getByLabel('Instance token').inputValue(), credentials.body.apiToken);
    await page.getByLabel('Key name').fill('CRM');
    await page.getByRole('button', { name: 'Create key' }).click();
    const shownKey = await page.getByLabel('Key “CRM”').inputValue();
    assert.equal((await server.client(shownKey).get(`/api/instances/${instanceId}`)).status, 200);
    await shot(page, 'instance-access-1280');
    await page.getByRole('button', { name: 'Revoke CRM' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
    await page.getByText('No integration keys.').waitFor();
    assert.equal((await server.client(shownKey).get(`/api/instances/${instanceId}`)).status, 401);

    // Activity: a message sent from the dashboard reaches `read`.
    await page.getByRole('link', { name: 'Activity' }).click();
    await page.getByLabel('To', { exact: true }).fill('5511999990003');
    await page.getByLabel('Text', { exact: true }).fill('Hello from the dashboard');
    await page.getByRole('button', { name: 'Send text' }).click();
    await page.locator('tr[data-message-id] [data-status="read"]').waitFor();
    await page.getByText('This instance (API)').waitFor();
    // A received document's signed link is new on every read; the table is not redrawn for it
    // (a focused link would lose the focus at every poll).
    const doc = await server.admin.post(`/sandbox/instances/${instanceId}/inbound`, { from: '5511977770000', type: 'document', mediaBase64: Buffer.from('%PDF-1.4 dashboard').toString('base64'), mimetype: 'application/pdf', fileName: 'terms.pdf' });
    assert.equal(doc.status, 200, doc.text);
    const download = page.getByRole('link', { name: /terms\.pdf/ });
    await download.focus();
    await page.evaluate(() => ((document.activeElement as HTMLElement & { marked?: boolean }).marked = true));
    await new Promise((resolve) => setTimeout(resolve, 6000)); // two polls
    assert.equal(await page.evaluate(() => (document.activeElement as HTMLElement & { marked?: boolean }).marked === true), true, 'the same focused link');

    // Webhook: the API's validation message appears next to the field; then a valid save.
    await page.getByRole('link', { name: 'Webhook' }).click();
    await page.getByLabel('General URL').fill('http://example.com/hook');
    await page.getByRole('button', { name: 'Save webhook' }).click();
    const urlError = page.locator('.field:has(input[name="url"]) .field-error');
    await urlError.waitFor();
    assert.equal(await page.getByLabel('General URL').getAttribute('aria-invalid'), 'true');
    await page.getByLabel('General URL').fill(receiver.url('/hook'));
    await page.getByLabel('Group messages').check();
    await page.getByRole('button', { name: 'Save webhook' }).click();
    await page.getByText('Webhook saved.').waitFor();
    assert.equal(await urlError.count(), 0);
    const saved = await server.admin.get(`/api/instances/${instanceId}`);
    assert.equal(saved.body.webhook.url, receiver.url('/hook'));
    assert.equal(saved.body.settings.ignoreGroups, true);
    await page.getByRole('button', { name: 'Reveal secret' }).click();
    const secret = await server.admin.get(`/api/instances/${instanceId}/webhook/secret`);
    assert.equal(await page.getByRole('textbox', { name: 'Signing secret' }).inputValue(), secret.body.secret);
    await shot(page, 'instance-webhook-1280');

    // A test event against a receiver answering 500 exhausts; Retry delivers it once the receiver recovers.
    await page.getByRole('button', { name: 'Send test event' }).click();
    await receiver.waitForRequests(8, 20_000, (r) => r.rawBody.toString().includes('"webhook.test"'));
    await page.getByRole('link', { name: 'Activity' }).click();
    const testRow = page.locator('tr[data-event-id]', { has: page.locator('code', { hasText: /^webhook\.test$/ }) });
    await testRow.locator('[data-status="exhausted"]').waitFor();
    assert.equal((await testRow.locator('td').nth(4).textContent())?.trim(), 'HTTP 500', 'the last result names the status once');
    await shot(page, 'instance-activity-1280');
    // Narrowed to the deliveries that gave up (the API's deliveryStatus), the list holds the test event alone.
    const show = page.getByLabel('Show', { exact: true });
    await show.selectOption('exhausted');
    await page.waitForFunction(() => document.querySelectorAll('tr[data-event-id]').length === 1);
    await testRow.locator('[data-status="exhausted"]').waitFor();
    await show.selectOption('retrying');
    await page.getByText('No delivery is being retried.').waitFor();
    await show.selectOption('');
    await page.waitForFunction(() => document.querySelectorAll('tr[data-event-id]').length > 1);
    receiver.respondWith(() => ({ status: 200 }));
    await testRow.getByRole('button', { name: /Retry/ }).click();
    await testRow.locator('[data-status="delivered"]').waitFor();
    // Its Retry button is gone with the redraw: the focus goes to the Events heading, not the page.
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Events');

    // After an outage, every delivery that gave up is retried at once from the narrowed list.
    receiver.respondWith(() => ({ status: 500 }));
    const second = await server.admin.post(`/api/instances/${instanceId}/webhook/test`);
    await eventually(async () => (await server.admin.get(`/api/instances/${instanceId}/events?deliveryStatus=exhausted`)).body.data.some((e: any) => e.id === second.body.id), 20_000, 'the second test event exhausted');
    receiver.respondWith(() => ({ status: 200 }));
    await show.selectOption('exhausted');
    await page.getByRole('button', { name: 'Retry every delivery that gave up' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Retry all' }).click();
    await page.getByText('1 delivery restarted.').waitFor();
    await page.getByText('No delivery has given up.').waitFor();
    await show.selectOption('retrying'); // the same (empty) rows under another filter read differently
    await page.getByText('No delivery is being retried.').waitFor();
    await show.selectOption('');
    await page.locator(`tr[data-event-id="${second.body.id}"] [data-status="delivered"]`).waitFor();

    // Statistics: the sent message is counted.
    await navLink(page, 'Statistics').click();
    await page.locator('svg.chart rect.type-text').first().waitFor();
    await shot(page, 'stats-1280');
    await navLink(page, 'Instances').click();
    await page.locator(`tr[data-instance-id="${instanceId}"] [data-status="connected"]`).waitFor();
    await shot(page, 'instances-1280');

    assert.ok(!page.url().includes(server.adminKey), 'the key must never be in the address');
    assert.deepEqual(pageProblems, []);

    // The key stops being accepted while Activity polls (three requests at a time): one sign-out,
    // with one message.
    await page.goto(`${server.url}/ui#/instances/${instanceId}/activity`);
    await page.getByRole('heading', { name: 'Recent sends' }).waitFor();
    await page.evaluate(() => sessionStorage.setItem('switchboard.adminKey', 'a-key-since-rotated'));
    await page.getByLabel('Administrative key').waitFor();
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(await page.getByText('The administrative key is no longer accepted').count(), 1);
  });

  it('renames, refreshes the QR code, disconnects, renews the token, regenerates the secret and resets', async () => {
    const created = await server.admin.post('/api/instances', { name: 'Lobby' });
    assert.equal(created.status, 201, created.text);
    const instanceId: string = created.body.id;
    const oldToken: string = created.body.apiToken;
    try {
      const page = await openPage(1280, 900);
      await signIn(page, server.adminKey);
      await page.getByRole('heading', { name: 'Instances', level: 1 }).waitFor();
      await page.locator(`tr[data-instance-id="${instanceId}"]`).getByRole('link', { name: 'Lobby' }).click();

      // Rename from the details form: the heading and the record follow.
      await page.getByRole('heading', { name: 'Lobby', level: 1 }).waitFor();
      // The skip link moves the focus to the content and leaves the page where it is.
      const address = page.url();
      await page.locator('.skip-link').focus();
      await page.keyboard.press('Enter');
      assert.equal(await page.evaluate(() => document.activeElement?.id), 'main');
      assert.equal(page.url(), address);
      assert.equal(await page.getByRole('heading', { name: 'Lobby', level: 1 }).count(), 1);
      await page.getByLabel('Name', { exact: true }).fill('Reception');
      await page.getByRole('button', { name: 'Save details' }).click();
      await page.getByRole('heading', { name: 'Reception', level: 1 }).waitFor();
      assert.equal((await server.admin.get(`/api/instances/${instanceId}`)).body.name, 'Reception');
      // Saving the form again sends only what changed in it: a rename made elsewhere meanwhile stays.
      assert.equal((await server.admin.patch(`/api/instances/${instanceId}`, { name: 'Front desk' })).status, 200);
      await page.getByRole('button', { name: 'Save details' }).click();
      await page.getByText('Details saved.').last().waitFor();
      assert.equal((await server.admin.get(`/api/instances/${instanceId}`)).body.name, 'Front desk');

      // The QR image follows the instance without a reload: a new code (here from a reconnect made
      // elsewhere) replaces the one on screen.
      const qr = page.getByRole('img', { name: /QR code/ });
      await qr.waitFor();
      const firstQr = await qr.getAttribute('src');
      assert.equal((await server.admin.post(`/api/instances/${instanceId}/disconnect`)).status, 200);
      assert.equal((await server.admin.post(`/api/instances/${instanceId}/connect`)).status, 200);
      await eventually(async () => {
        const src = await qr.getAttribute('src');
        return (await qr.isVisible()) && src !== firstQr && /^data:image\/png;base64,/.test(src ?? '');
      }, UI_TIMEOUT_MS, 'a refreshed QR image');
      assert.equal(await qr.getAttribute('src'), (await server.admin.get(`/api/instances/${instanceId}`)).body.qrImage);
      assert.equal((await server.admin.post(`/sandbox/instances/${instanceId}/scan`, { phone: '5511966665555' })).status, 200);
      await page.locator('.instance-state [data-status="connected"]').waitFor();

      // Disconnect pauses the instance (sends refused); Connect resumes it without a new scan.
      await page.getByRole('button', { name: 'Disconnect' }).click();
      await page.getByText('Paused by a disconnect').waitFor();
      const paused = await server.client(oldToken).post(`/api/instances/${instanceId}/messages`, { phone: '5511999990003', type: 'text', text: 'paused?' });
      assert.equal(paused.status, 409, paused.text);
      await page.getByRole('button', { name: 'Connect', exact: true }).click();
      await page.locator('.instance-state [data-status="connected"]').waitFor();

      // Token renewal: the new token is shown; the old one stops working at once.
      await page.getByRole('link', { name: 'Access' }).click();
      await page.getByRole('button', { name: 'Renew token' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Renew token' }).click();
      const newToken = await page.getByLabel('New instance token').inputValue();
      assert.notEqual(newToken, oldToken);
      assert.equal((await server.client(oldToken).get(`/api/instances/${instanceId}`)).status, 401);

      // A send made through the API with the new token is followed to `read` in Activity.
      const sent = await server.client(newToken).post(`/api/instances/${instanceId}/messages`, { phone: '5511999990003', type: 'text', text: 'via the API' });
      assert.equal(sent.status, 202, sent.text);
      await page.getByRole('link', { name: 'Activity' }).click();
      await page.locator(`tr[data-message-id="${sent.body.id}"] [data-status="read"]`).waitFor();

      // Secret regeneration: the new secret is shown and is the one the API now returns.
      await page.getByRole('link', { name: 'Webhook' }).click();
      await page.getByRole('button', { name: 'Reveal secret' }).click();
      const oldSecret = await page.getByRole('textbox', { name: 'Signing secret' }).inputValue();
      await page.getByRole('button', { name: 'Regenerate secret' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Regenerate' }).click();
      await page.getByText('New secret; the previous one is no longer used.').waitFor();
      const newSecret = await page.getByRole('textbox', { name: 'Signing secret' }).inputValue();
      assert.notEqual(newSecret, oldSecret);
      assert.equal((await server.admin.get(`/api/instances/${instanceId}/webhook/secret`)).body.secret, newSecret);

      // A save sends only the settings changed in the form: one changed elsewhere meanwhile stays.
      assert.equal((await server.admin.put(`/api/instances/${instanceId}/settings`, { disableOfflineQueue: true })).status, 200);
      await page.getByLabel('Reject incoming calls').check();
      await page.getByRole('button', { name: 'Save webhook' }).click();
      await page.getByText('Webhook saved.').waitFor();
      const settings = (await server.admin.get(`/api/instances/${instanceId}`)).body.settings;
      assert.deepEqual([settings.autoRejectCalls, settings.disableOfflineQueue], [true, true]);
      assert.equal((await server.admin.put(`/api/instances/${instanceId}/settings`, { disableOfflineQueue: false })).status, 200);

      // Reset unlinks the phone: the instance is no longer connected and must be paired again.
      await page.getByRole('link', { name: 'Overview' }).click();
      await page.getByRole('button', { name: 'Reset' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Reset' }).click();
      await page.locator('.instance-state [data-status="connected"]').waitFor({ state: 'detached' });
      const afterReset = (await server.admin.get(`/api/instances/${instanceId}`)).body;
      assert.notEqual(afterReset.state, 'connected');
      assert.equal(afterReset.phone, null, 'the phone is unlinked');
      await page.getByText('Instance reset; pair it again to use it.').waitFor();

      for (const secret of [server.adminKey, oldToken, newToken, oldSecret, newSecret]) assert.ok(!page.url().includes(secret), 'no secret in the address');
      assert.deepEqual(pageProblems, []);
    } finally {
      await server.admin.delete(`/api/instances/${instanceId}`); // the next test counts the instances
    }
  });

  it('pairs by phone code, manages projects and deletes at phone width, by keyboard, without sideways scrolling', async () => {
    const created = await server.admin.post('/api/instances', { name: 'Shop phone' });
    assert.equal(created.status, 201, created.text);
    const instanceId: string = created.body.id;
    const page = await openPage(390, 844);
    await page.goto(`${server.url}/ui`);
    await page.getByLabel('Administrative key').waitFor();
    await shot(page, 'sign-in-390');
    // Keyboard only: tab to the key field, type, press Enter.
    await eventually(async () => {
      await page.keyboard.press('Tab');
      return page.evaluate(() => (document.activeElement as HTMLInputElement | null)?.name === 'adminKey');
    }, 5_000, 'focus on the key field');
    await page.keyboard.type(server.adminKey);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Instances', level: 1 }).waitFor();

    // Phone pairing: request a code, complete it through the sandbox, watch the state turn connected.
    await page.locator(`tr[data-instance-id="${instanceId}"]`).getByRole('link', { name: 'Shop phone' }).click();
    await page.getByRole('textbox', { name: 'Phone number' }).fill('+55 11');
    await page.getByRole('button', { name: 'Get pairing code' }).click();
    await page.locator('.field:has(input[name="phone"]) .field-error').waitFor();
    await page.getByRole('textbox', { name: 'Phone number' }).fill('5511977776666');
    await page.getByRole('button', { name: 'Get pairing code' }).click();
    const code = (await page.locator('.pairing-code').textContent())?.trim() ?? '';
    assert.ok(code.length > 0);
    await shot(page, 'instance-pairing-390');
    const paired = await server.admin.post(`/sandbox/instances/${instanceId}/pair`, { code });
    assert.equal(paired.status, 200, paired.text);
    await page.locator('.instance-state [data-status="connected"]').waitFor();
    // Disconnected, it keeps its link: pairing again asks first, and nothing happens on Cancel.
    await page.getByRole('button', { name: 'Disconnect' }).click();
    await page.getByText('Paused by a disconnect; credentials are kept. Connect to resume.').waitFor();
    await page.getByRole('textbox', { name: 'Phone number' }).fill('5511977775555');
    const pairAgain = async (answer: string) => {
      await page.getByRole('button', { name: 'Get pairing code' }).click();
      await page.getByRole('dialog', { name: 'Pair this instance again?' }).getByText('keeps its link to +5511977776666').waitFor();
      await page.getByRole('button', { name: answer }).click();
    };
    await pairAgain('Cancel');
    const kept = (await server.admin.get(`/api/instances/${instanceId}`)).body;
    assert.deepEqual([kept.paused, kept.phone], [true, '5511977776666'], 'Cancel leaves the link');
    await new Promise((resolve) => setTimeout(resolve, 1100)); // one code per PAIRING_CODE_INTERVAL_MS
    await pairAgain('Give up the link and pair');
    const newCode = await eventually(async () => {
      const shown = (await page.locator('.pairing-code').textContent())?.trim();
      return shown !== code && shown;
    }, 10_000, 'a new code in place of the first');
    assert.equal((await server.admin.post(`/sandbox/instances/${instanceId}/pair`, { code: newCode })).status, 200);
    await page.getByText('Connected as +5511977775555.').waitFor();

    const pages: [string, string, string][] = [
      ['instances', '#/instances', 'tr[data-instance-id]'],
      ['projects', '#/projects', 'tr[data-project-id]'],
      ['stats', '#/stats', 'svg.chart'],
    ];
    for (const tab of ['', '/access', '/webhook', '/activity']) {
      pages.push([`instance${tab.replace('/', '-') || '-overview'}`, `#/instances/${instanceId}${tab}`, 'main section.card']);
    }
    for (const [name, hash, ready] of pages) {
      await page.goto(`${server.url}/ui${hash}`);
      await page.locator(ready).first().waitFor();
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${name} scrolls sideways by ${overflow}px at 390px`);
      await shot(page, `${name}-390`);
    }
    // Filter by project, rename and delete the project (its instance stays), delete an instance.
    await page.goto(`${server.url}/ui#/instances`);
    const focusedName = () => page.evaluate(() => (document.activeElement as HTMLElement | null)?.getAttribute('name') ?? document.activeElement?.textContent ?? '');
    // The list is filtered in place: each arrow key is a change, and the focus stays on the list box.
    const filter = page.getByLabel('Filter by project');
    await filter.focus();
    await page.keyboard.press('ArrowDown');
    await eventually(async () => new URL(page.url()).hash === '#/instances?project=none', UI_TIMEOUT_MS, 'the filter in the address');
    assert.equal(await focusedName(), 'project', 'focus kept on the filter');
    await filter.selectOption('support');
    await eventually(async () => {
      assert.deepEqual(await page.locator('tr[data-instance-id] a').allTextContents(), ['Front desk']);
      return true;
    }, UI_TIMEOUT_MS, 'only the project\'s instance listed');
    assert.equal(new URL(page.url()).hash, '#/instances?project=support');
    // The list refreshes every 5 s, redrawn only when it changed: a focused row keeps the focus.
    await page.locator('tr[data-instance-id] a').first().focus();
    await new Promise((resolve) => setTimeout(resolve, 5_500));
    assert.equal(await focusedName(), 'Front desk', 'focus kept across a refresh');
    await navLink(page, 'Projects').click();
    // Rename: Escape and Save give the focus back to the row's Rename button.
    await page.getByRole('button', { name: 'Rename Support team' }).click();
    await page.keyboard.press('Escape');
    assert.match(await focusedName(), /^Rename Support team/);
    await page.getByRole('button', { name: 'Rename Support team' }).click();
    await page.getByLabel('New name').fill('Customer care');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.locator('tr[data-project-id="support"]', { hasText: 'Customer care' }).waitFor();
    await eventually(async () => /^Rename Customer care/.test(await focusedName()), UI_TIMEOUT_MS, 'focus on the renamed row');
    await page.getByRole('button', { name: 'Delete Customer care' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByText('No projects yet.').waitFor();
    const instances = (await server.admin.get('/api/instances')).body.data as { name: string; projectId: string | null }[];
    assert.deepEqual(instances.map((i) => [i.name, i.projectId]).sort(), [['Front desk', null], ['Shop phone', null]]);
    // "." is no id: it would name the instance list's own API path.
    await page.goto(`${server.url}/ui#/instances/.`);
    await page.getByRole('heading', { name: 'Page not found', level: 1 }).waitFor();
    await page.goto(`${server.url}/ui#/instances/${instanceId}`);
    await page.getByRole('button', { name: 'Delete instance' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('heading', { name: 'Instances', level: 1 }).waitFor();
    assert.equal((await server.admin.get(`/api/instances/${instanceId}`)).status, 404);

    // Focus is visible: the focused element gets an outline.
    await page.goto(`${server.url}/ui#/projects`);
    await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor();
    await page.keyboard.press('Tab');
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement as Element).outlineStyle);
    assert.notEqual(outline, 'none');
    assert.deepEqual(pageProblems, []);
  });
});
