// Save-time checks of webhook destinations: the URL's form, then where its host name resolves.
import assert from 'node:assert/strict';
import { resolvedHostProblem, webhookUrlProblem } from '../src/webhook-url.ts';

describe('webhook destinations at save time', () => {
  const resolvingTo = (...addresses: string[]) => async () => addresses;

  it('refuses a host name with any non-public address, and accepts one with public addresses only', async () => {
    const url = 'https://hooks.example.com/in';
    assert.equal(webhookUrlProblem(url, false), undefined, 'the form is fine');
    assert.equal(await resolvedHostProblem(url, false, resolvingTo('93.184.216.34', '2606:2800:220:1::1')), undefined);
    for (const internal of ['127.0.0.1', '10.0.0.1', '169.254.169.254', '::1', 'fd00::1']) {
      assert.equal(await resolvedHostProblem(url, false, resolvingTo('93.184.216.34', internal)), 'must resolve to public addresses only', internal);
    }
  });

  it('refuses URLs that only a forgiving parser reads as https://', () => {
    const odd = ['https:hooks.example.com/in', 'https:/hooks.example.com/in', 'https:///hooks.example.com/in', 'https:\\\\hooks.example.com/in'];
    odd.push('https://\\hooks.example.com/in', 'https://hooks.example.com\\in', 'https://hooks.exa\tmple.com/in', 'https://hooks.example.com/a b');
    for (const url of odd) assert.equal(webhookUrlProblem(url, true), 'must be an absolute https:// URL or an empty string', url);
    assert.equal(webhookUrlProblem('https://@hooks.example.com/in', true), 'must not carry credentials');
    assert.equal(webhookUrlProblem('https://hooks.example.com/in?by=ops@example.com', false), undefined, 'an @ after the host is fine');
    assert.equal(webhookUrlProblem('HTTPS://hooks.example.com/in', false), undefined);
    assert.equal(webhookUrlProblem('http://hooks.example.com/in', false), 'must use https');
  });

  it('accepts a name that does not resolve now, or not in time: delivery resolves it again', async () => {
    const url = 'https://not-yet.example.com/in';
    assert.equal(await resolvedHostProblem(url, false, async () => Promise.reject(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' }))), undefined);
    assert.equal(await resolvedHostProblem(url, false, () => new Promise(() => undefined), 20), undefined);
  });

  it('does not resolve empty destinations, literal addresses, or anything when private targets are allowed', async () => {
    const never = async (): Promise<string[]> => assert.fail('must not resolve');
    assert.equal(await resolvedHostProblem('', false, never), undefined);
    assert.equal(await resolvedHostProblem('https://93.184.216.34/in', false, never), undefined);
    assert.equal(await resolvedHostProblem('https://[2606:2800:220:1::1]/in', false, never), undefined);
    assert.equal(await resolvedHostProblem('https://hooks.example.com/in', true, never), undefined);
  });
});
