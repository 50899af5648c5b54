// Pure pieces of the dispatcher: signatures, address policy, Retry-After, backoff, breakers.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { retryDelayMs } from '../src/backoff.ts';
import { wakeUpTime } from '../src/scheduler.ts';
import { CircuitBreakers } from '../src/breaker.ts';
import { QUICK_ANSWER_MS, RESPONSIVE_FOR_MS, ResponsiveDestinations } from '../src/responsive-destinations.ts';
import { DestinationConcurrency, type AttemptAnswer } from '../src/destination-concurrency.ts';
import { checkWebhookUrl, isPublicAddress, parseRetryAfter } from '../src/egress.ts';
import { computeSignature, signatureHeaders, verifySignature } from '../src/signing.ts';

describe('signing', () => {
  const secret = 'whsec_ünïcode-secret';
  const body = '{"id":"evt_1","data":{"text":"olá"}}';

  it('signs timestamp + "." + raw body with the secret as UTF-8 key', () => {
    const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`1700000000.${body}`, 'utf8').digest('hex');
    assert.equal(computeSignature(secret, 1700000000, body), expected);
    assert.equal(computeSignature(secret, '1700000000', Buffer.from(body, 'utf8')), expected);
  });

  it('builds the attempt headers', () => {
    const h = signatureHeaders({ eventId: 'evt_1', secret, rawBody: body, timestamp: 1700000000 });
    assert.equal(h['content-type'], 'application/json');
    assert.equal(h['x-service-event-id'], 'evt_1');
    assert.equal(h['x-service-timestamp'], '1700000000');
    assert.match(h['x-service-signature'], /^sha256=[0-9a-f]{64}$/);
  });

  it('verifies a fresh signature and rejects tampering, other secrets and old timestamps', () => {
    const now = 1700000000_000;
    const ts = String(now / 1000);
    const header = signatureHeaders({ eventId: 'e', secret, rawBody: body, timestamp: now / 1000 })['x-service-signature'];
    assert.equal(verifySignature(secret, ts, body, header, 300, now), true);
    assert.equal(verifySignature(secret, ts, body + ' ', header, 300, now), false);
    assert.equal(verifySignature('other', ts, body, header, 300, now), false);
    assert.equal(verifySignature(secret, ts, body, header, 300, now + 301_000), false);
    assert.equal(verifySignature(secret, ts, body, header.replace('sha256=', 'sha1='), 300, now), false);
    assert.equal(verifySignature(secret, ts, body, 'sha256=zz', 300, now), false);
    assert.equal(verifySignature(secret, 'abc', body, header, 300, now), false);
  });
});

describe('isPublicAddress', () => {
  const refused = [
    '127.0.0.1', '127.255.255.254', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254',
    '100.64.0.1', '100.127.255.255', '0.0.0.0', '224.0.0.1', '239.255.255.250', '255.255.255.255', '240.0.0.1',
    '192.0.2.5', '198.51.100.7', '203.0.113.9', '198.18.0.1',
    '::', '::1', '::ffff:127.0.0.1', '::ffff:8.8.8.8', '::ffff:7f00:1', 'fc00::1', 'fd12:3456::1', 'fe80::1', 'fe80::1%eth0',
    'ff02::1', '64:ff9b::a00:1', '2001:db8::1', '2002:7f00:1::1', '2001:0:4136:e378::1',
    'localhost', 'not-an-ip', '',
  ];
  const allowed = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '93.184.216.34', '2606:4700:4700::1111', '2a00:1450:4001::1'];
  for (const ip of refused) it(`refuses ${ip || '(empty)'}`, () => assert.equal(isPublicAddress(ip), false));
  for (const ip of allowed) it(`allows ${ip}`, () => assert.equal(isPublicAddress(ip), true));
});

describe('checkWebhookUrl', () => {
  it('requires https, port 443 (unless private targets are allowed) and no credentials', () => {
    assert.throws(() => checkWebhookUrl('http://example.com/', false), /https/);
    assert.throws(() => checkWebhookUrl('https://example.com:8443/', false), /port 443/);
    assert.doesNotThrow(() => checkWebhookUrl('https://example.com:8443/', true));
    assert.throws(() => checkWebhookUrl('http://127.0.0.1:8443/', true), /https/);
    assert.throws(() => checkWebhookUrl('https://u:p@example.com/', false), /credentials/);
    assert.throws(() => checkWebhookUrl('nope', false), /not a valid URL/);
    assert.doesNotThrow(() => checkWebhookUrl('https://example.com:443/x?y=1', false));
  });
});

describe('parseRetryAfter', () => {
  it('reads delta-seconds and HTTP dates', () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    assert.equal(parseRetryAfter('120', now), 120_000);
    assert.equal(parseRetryAfter('Wed, 01 Jan 2025 00:00:30 GMT', now), 30_000);
    assert.equal(parseRetryAfter('Tue, 31 Dec 2024 00:00:00 GMT', now), 0);
    assert.equal(parseRetryAfter('soon', now), undefined);
    assert.equal(parseRetryAfter(undefined, now), undefined);
  });
});

describe('retryDelayMs', () => {
  const schedule = [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000];
  it('uses the schedule entry of the next attempt with ±20 % jitter', () => {
    assert.equal(retryDelayMs({ schedule, random: () => 0.5 }, 1), 1000);
    assert.equal(retryDelayMs({ schedule, random: () => 0 }, 1), 800);
    assert.equal(retryDelayMs({ schedule, random: () => 0.999999 }, 3), 3600);
    assert.equal(retryDelayMs({ schedule, random: () => 0.5 }, 7), 7000);
  });
  it('is undefined after the 8th attempt', () => {
    assert.equal(retryDelayMs({ schedule, random: () => 0.5 }, 8), undefined);
  });
  it('honours Retry-After as a floor, capped', () => {
    assert.equal(retryDelayMs({ schedule, random: () => 0.5 }, 1, 5000), 5000);
    assert.equal(retryDelayMs({ schedule, random: () => 0.5 }, 1, 10), 1000);
    assert.equal(retryDelayMs({ schedule, random: () => 0.5, retryAfterCapMs: 3000 }, 1, 99_000), 3000);
  });
});

describe('wakeUpTime', () => {
  const now = 1_700_000_000_123;
  const poll = 500;

  it('wakes a retry on its due time, at most 2 % (or 10 ms) late, whatever the poll interval', () => {
    for (const ms of [0, 7, 200, 499, 500, 1_000, 5_000, 20_000, 24_999]) {
      const at = wakeUpTime(now, ms, poll)!;
      assert.ok(at >= now + ms, `${ms}: not early`);
      assert.ok(at - (now + ms) <= Math.max(10, ms / 50), `${ms}: ${at - now - ms} ms late`);
    }
  });

  it('leaves to the poll a retry it serves at most 2 % late, and a delay that is no number', () => {
    assert.equal(wakeUpTime(now, 25_000, poll), undefined);
    assert.equal(wakeUpTime(now, 300_000, poll), undefined);
    assert.equal(wakeUpTime(now, NaN, poll), undefined);
    assert.ok(wakeUpTime(now, 300_000, 10_000), 'a slower poll leaves more to the wake-ups');
  });

  it('gives retries due close together one wake-up, so failures cannot pile up timers', () => {
    const times = new Set(Array.from({ length: 1000 }, (_, i) => wakeUpTime(now, 5_000 + i / 10, poll)));
    assert.ok(times.size <= 3, `${times.size} wake-ups for 1000 retries within 100 ms`);
  });
});

describe('CircuitBreakers', () => {
  it('opens after the threshold of time-outs, lets one probe through after the cool-down, closes on success', () => {
    let now = 0;
    const b = new CircuitBreakers({ threshold: 3, cooldownMs: 100, now: () => now });
    b.recordTimeout('a');
    b.recordTimeout('a');
    assert.deepEqual(b.admit('a'), { allowed: true });
    b.recordTimeout('a');
    assert.deepEqual(b.admit('a'), { allowed: false, retryAt: 100 });
    assert.deepEqual(b.admit('b'), { allowed: true }, 'other destinations are unaffected');
    now = 100;
    assert.deepEqual(b.admit('a'), { allowed: true }, 'the probe');
    assert.equal(b.admit('a').allowed, false, 'only one probe at a time');
    b.recordPromptOutcome('a');
    assert.deepEqual(b.admit('a'), { allowed: true });
  });
  it('a prompt outcome, failed or not, resets the count of time-outs', () => {
    const b = new CircuitBreakers({ threshold: 2, cooldownMs: 100, now: () => 0 });
    b.recordTimeout('a');
    b.recordPromptOutcome('a'); // say, an HTTP 500 at once: the receiver does not hang
    b.recordTimeout('a');
    assert.deepEqual(b.admit('a'), { allowed: true });
    b.recordTimeout('a');
    assert.equal(b.admit('a').allowed, false);
  });
  it('a probe that told nothing frees the way for the next probe and leaves the breaker open', () => {
    let now = 0;
    const b = new CircuitBreakers({ threshold: 1, cooldownMs: 100, now: () => now });
    b.recordTimeout('a');
    now = 100;
    assert.equal(b.admit('a').allowed, true, 'the probe');
    assert.equal(b.admit('a').allowed, false, 'one probe at a time');
    b.releaseProbe('a'); // say, its event was deleted meanwhile
    assert.equal(b.admit('a').allowed, true, 'the next probe');
    assert.equal(b.admit('a').allowed, false, 'still half-open, not closed');
    b.releaseProbe('unknown'); // nothing to release
    assert.deepEqual(b.admit('unknown'), { allowed: true });
  });
  it('a failed probe opens it again', () => {
    let now = 0;
    const b = new CircuitBreakers({ threshold: 1, cooldownMs: 100, now: () => now });
    b.recordTimeout('a');
    now = 150;
    assert.equal(b.admit('a').allowed, true);
    b.recordTimeout('a');
    assert.deepEqual(b.admit('a'), { allowed: false, retryAt: 250 });
  });
});

describe('ResponsiveDestinations', () => {
  it('a destination is responsive after a quick answer, until it has not answered quickly for a while', () => {
    let now = 0;
    const d = new ResponsiveDestinations(() => now);
    assert.equal(d.isResponsive('a'), false, 'never seen');
    d.answered('a', QUICK_ANSWER_MS + 1);
    assert.equal(d.isResponsive('a'), false, 'a slow answer earns nothing');
    d.answered('a', 5);
    assert.equal(d.isResponsive('a'), true);
    assert.equal(d.isResponsive('b'), false, 'per destination');
    now += RESPONSIVE_FOR_MS + 1;
    assert.equal(d.isResponsive('a'), false, 'lapsed');
  });
});

describe('DestinationConcurrency', () => {
  const setup = (bounds = { base: 4, max: 12 }) => {
    const clock = { now: 0 };
    return { clock, c: new DestinationConcurrency(bounds, () => clock.now) };
  };
  /** One round trip of answers at the URL's current limit. */
  const roundTrip = (c: DestinationConcurrency, key: string, answer: AttemptAnswer) => {
    for (let i = c.limitOf(key); i > 0; i--) c.answered(key, answer);
  };
  const quick = { tookMs: 100, statusCode: 200, backlog: true };

  it('earns one slot per round trip of prompt answers while it has a backlog, up to the most', () => {
    const { c } = setup();
    assert.equal(c.limitOf('a'), 4);
    roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 5);
    roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 6);
    assert.equal(c.limitOf('b'), 4, 'per URL');
    for (let i = 0; i < 50; i++) roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 12, 'never past the most');
    roundTrip(c, 'c', { ...quick, backlog: false });
    assert.equal(c.aboveBaseCount(), 1, 'URLs above their base (the gauge): a, not b nor c');
  });

  it('earns nothing without a backlog, for failures, or for answers slower than a second', () => {
    const { c } = setup();
    for (let i = 0; i < 20; i++) roundTrip(c, 'a', { ...quick, backlog: false });
    assert.equal(c.limitOf('a'), 4, 'no backlog: more slots would not be used');
    for (let i = 0; i < 20; i++) roundTrip(c, 'b', { tookMs: 15_000, statusCode: null, backlog: true });
    assert.equal(c.limitOf('b'), 4, 'a hanging URL keeps its base');
    for (let i = 0; i < 20; i++) roundTrip(c, 'c', { tookMs: 1500, statusCode: 200, backlog: true });
    assert.equal(c.limitOf('c'), 4, 'answers slower than a second earn nothing');
    for (let i = 0; i < 20; i++) roundTrip(c, 'e', { ...quick, statusCode: 500 });
    assert.equal(c.limitOf('e'), 4, 'neither do failures, however prompt: a broken receiver gets no more at once');
  });

  it('stops growing where the receiver starts to queue: answers twice as slow as its fastest', () => {
    // A receiver that serves 5 requests at once in 100 ms and queues the rest.
    const { c } = setup({ base: 4, max: 32 });
    const seen = new Set<number>();
    for (let i = 0; i < 200; i++) {
      const limit = c.limitOf('a');
      seen.add(limit);
      roundTrip(c, 'a', { ...quick, tookMs: 100 * Math.max(1, limit / 5) });
    }
    assert.ok(Math.max(...seen) <= 11 && Math.max(...seen) >= 10, `grew to where answers take twice as long, and no further: ${[...seen]}`);
    assert.ok(c.limitOf('a') >= 9, 'and stays about there');
  });

  it('a receiver that became slower for good is judged by its new pace once back at base', () => {
    const { c } = setup();
    roundTrip(c, 'a', quick);
    roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 6);
    const slower = { ...quick, tookMs: 250 };
    roundTrip(c, 'a', slower);
    roundTrip(c, 'a', slower);
    assert.equal(c.limitOf('a'), 4, 'over twice as slow: a slot back per round trip');
    for (let i = 0; i < 10; i++) roundTrip(c, 'a', slower);
    assert.ok(c.limitOf('a') > 4, 'then 250 ms is its pace, and it earns slots again');
  });

  it('gives its slots back at once on strain: all on a time-out, half on 429 or 503', () => {
    const { c } = setup({ base: 4, max: 64 });
    for (let i = 0; i < 40; i++) roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 44);
    c.answered('a', { ...quick, statusCode: 503 });
    assert.equal(c.limitOf('a'), 22);
    c.answered('a', { ...quick, statusCode: 429 });
    assert.equal(c.limitOf('a'), 11);
    c.answered('a', { ...quick, statusCode: 503 });
    assert.equal(c.limitOf('a'), 5);
    c.answered('a', { ...quick, statusCode: 503 });
    assert.equal(c.limitOf('a'), 4, 'never below its base');
    for (let i = 0; i < 4; i++) c.answered('a', quick);
    assert.equal(c.limitOf('a'), 5);
    c.answered('a', { ...quick, statusCode: 500 });
    assert.equal(c.limitOf('a'), 5, 'another error status neither earns nor gives back');
    c.answered('a', { tookMs: 30, statusCode: null, backlog: true });
    assert.equal(c.limitOf('a'), 4, 'no answer: back to base');
  });

  it('starts afresh from its base when unused for a while; is off when the most is the base', () => {
    const { c, clock } = setup();
    for (let i = 0; i < 5; i++) roundTrip(c, 'a', quick);
    assert.equal(c.limitOf('a'), 9);
    clock.now += RESPONSIVE_FOR_MS + 1;
    assert.equal(c.aboveBaseCount(), 0);
    assert.equal(c.limitOf('a'), 4);
    const off = setup({ base: 4, max: 4 }).c;
    for (let i = 0; i < 10; i++) roundTrip(off, 'a', quick);
    assert.equal(off.limitOf('a'), 4);
  });
});
