// Outbound media checks done at acceptance (src/media/outbound.ts): mimetype rules per message
// type, strict base64 decoding and the 32 MiB limit. (Named voice-note-* to stay within the
// media work's test paths; it covers all outbound media checks.)
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { Problem } from '@switchboard/core';
import { mediaFixtures } from '../../../test/fixtures/media/index.ts';
import { MAX_MEDIA_BYTES, checkMimetype, decodeBase64Strict, assertMimetype } from '../src/media/outbound.ts';

function expectProblem(fn: () => unknown, status: number, code: string, path: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof Problem, String(err));
    assert.equal(err.status, status);
    assert.equal(err.code, code);
    assert.equal(err.errors?.[0]?.path, path);
    return true;
  });
}

describe('outbound media: checkMimetype', () => {
  const accepted: [string, string][] = [
    ['image', 'image/jpeg'],
    ['image', 'IMAGE/PNG'],
    ['video', 'video/mp4'],
    ['audio', 'audio/ogg; codecs=opus'],
    ['audio', 'audio/mpeg'],
    ['sticker', 'image/webp'],
    ['sticker', 'Image/WebP'],
    ['sticker', 'image/png'],
    ['sticker', 'image/jpeg'],
    ['sticker', 'image/gif'],
    ['document', 'application/pdf'],
    ['document', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'],
    ['document', 'text/plain; charset="utf-8"'],
    ['document', 'image/png'],
  ];
  for (const [type, mimetype] of accepted) {
    it(`accepts ${mimetype} for ${type}`, () => {
      assert.equal(checkMimetype(type, mimetype), undefined);
      assertMimetype(type, mimetype);
    });
  }

  it('stores the type and subtype lowercased and trimmed, the parameters as given', () => {
    assert.equal(assertMimetype('image', ' IMAGE/PNG '), 'image/png');
    assert.equal(assertMimetype('sticker', 'Image/WebP'), 'image/webp');
    assert.equal(assertMimetype('document', 'Text/Plain; charset="UTF-8"'), 'text/plain; charset="UTF-8"');
    assert.equal(assertMimetype('audio', 'Audio/Ogg;codecs=opus'), 'audio/ogg;codecs=opus');
  });

  it('accepts every sample fixture for its own type and decodes its base64', () => {
    for (const f of Object.values(mediaFixtures)) {
      assert.equal(checkMimetype(f.type, f.mimetype), undefined, f.path);
      assert.ok(decodeBase64Strict(f.base64()).equals(f.bytes()), f.path);
    }
  });

  const refused: [string, string][] = [
    ['image', 'video/mp4'],
    ['image', 'application/pdf'],
    ['video', 'image/gif'],
    ['audio', 'video/mp4'],
    ['sticker', 'image/svg+xml'],
    ['sticker', 'video/mp4'],
    ['sticker', 'image/webpx'],
    ['document', 'pdf'],
    ['document', 'application/'],
    ['document', '/pdf'],
    ['document', 'application/pdf/extra'],
    ['document', 'application/p df'],
    ['document', ''],
    ['image', 'image/png\r\nX-Injected: 1'],
  ];
  for (const [type, mimetype] of refused) {
    it(`refuses ${JSON.stringify(mimetype)} for ${type} with 400 on path mimetype`, () => {
      const problem = checkMimetype(type, mimetype);
      assert.ok(problem instanceof Problem);
      assert.equal(problem.status, 400);
      assert.deepEqual(problem.errors?.map((e) => e.path), ['mimetype']);
      expectProblem(() => assertMimetype(type, mimetype), 400, problem.code, 'mimetype');
    });
  }
});

describe('outbound media: decodeBase64Strict', () => {
  it('decodes any bytes encoded as standard base64', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 300 }), (bytes) => {
        assert.ok(decodeBase64Strict(Buffer.from(bytes).toString('base64')).equals(Buffer.from(bytes)));
      }),
    );
  });

  for (const [label, value] of [
    ['a data: prefix', 'data:image/png;base64,iVBORw0KGgo='],
    ['a DATA: prefix in capitals', 'DATA:text/plain;base64,aGVsbG8='],
    ['an empty value', ''],
    ['line breaks', 'aGVs\nbG8='],
    ['spaces', 'aGVs bG8='],
    ['base64url characters', 'a-_b'],
    ['other characters', 'aGVsbG8*'],
    ['missing padding', 'aGVsbG8'],
    ['too much padding', 'aGVsbA==='],
    ['padding in the middle', 'aG==bG8='],
    ['a lone padded character', 'a==='],
    ['non-canonical trailing bits', 'QR=='],
  ] as const) {
    it(`refuses ${label} with 400 invalid_base64`, () => {
      expectProblem(() => decodeBase64Strict(value), 400, 'invalid_base64', 'base64');
    });
  }

  it('refuses a non-string value', () => {
    expectProblem(() => decodeBase64Strict(42 as unknown as string), 400, 'invalid_base64', 'base64');
  });

  it('accepts exactly the limit and refuses one byte more with 413 media_too_large (small limit)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 200 }), (limit) => {
        assert.equal(decodeBase64Strict(randomBytes(limit).toString('base64'), limit).length, limit);
        expectProblem(() => decodeBase64Strict(randomBytes(limit + 1).toString('base64'), limit), 413, 'media_too_large', 'base64');
      }),
      { numRuns: 50 },
    );
  });

  it('accepts exactly 32 MiB (33554432 bytes) and refuses 32 MiB + 1', function () {
    this.timeout(20_000);
    assert.equal(MAX_MEDIA_BYTES, 33_554_432);
    const exact = Buffer.alloc(MAX_MEDIA_BYTES, 7);
    assert.equal(decodeBase64Strict(exact.toString('base64')).length, MAX_MEDIA_BYTES);
    const over = Buffer.alloc(MAX_MEDIA_BYTES + 1, 7).toString('base64');
    expectProblem(() => decodeBase64Strict(over), 413, 'media_too_large', 'base64');
  });

  it('refuses an oversized value by its length alone, before looking at its characters', () => {
    // 48 MiB of characters that are not base64: the size verdict comes first (and cheaply).
    expectProblem(() => decodeBase64Strict('!'.repeat(48 * 1024 * 1024)), 413, 'media_too_large', 'base64');
  });
});
