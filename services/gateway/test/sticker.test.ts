// convertToSticker against real ffmpeg, checked with ffprobe (Debian's ffmpeg package).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Problem } from '@switchboard/core';
import { mediaFixtures } from '../../../test/fixtures/media/index.ts';
import { convertToSticker } from '../src/media/sticker.ts';
import { openFfmpegScratch } from './ffmpeg-scratch.ts';

const run = promisify(execFile);

interface Probe {
  streams: { codec_name: string; width: number; height: number }[];
}

describe('stickers (convertToSticker)', function () {
  this.timeout(30_000);
  let dir: string;
  let ffmpeg: string;

  before(async () => {
    ({ dir, ffmpeg } = await openFfmpegScratch('sb-sticker-test-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function probe(bytes: Buffer): Promise<Probe['streams'][0]> {
    const file = join(dir, `probe-${Math.random().toString(36).slice(2)}.webp`);
    await writeFile(file, bytes);
    const { stdout } = await run('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,width,height', '-of', 'json', file]);
    return (JSON.parse(stdout) as Probe).streams[0];
  }

  function assertWebp(bytes: Buffer): void {
    assert.deepEqual([bytes.toString('latin1', 0, 4), bytes.toString('latin1', 8, 12)], ['RIFF', 'WEBP']);
  }

  for (const f of [mediaFixtures.png, mediaFixtures.jpg]) {
    it(`fits a ${f.mimetype} into a 512×512 WebP`, async () => {
      const sticker = await convertToSticker(f.bytes());
      assertWebp(sticker);
      const p = await probe(sticker);
      assert.deepEqual([p.codec_name, p.width, p.height], ['webp', 512, 512]);
    });
  }

  it('keeps a GIF animated, at most 10 s of it', async () => {
    const gif = join(dir, 'moving.gif');
    await run(ffmpeg, ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc=size=120x80:rate=5', '-t', '12', gif]);
    const sticker = await convertToSticker(await readFile(gif));
    assertWebp(sticker);
    // An animated WebP carries an ANIM chunk and one ANMF chunk per frame.
    const frames = sticker.toString('latin1').split('ANMF').length - 1;
    assert.ok(sticker.includes('ANIM'), 'animated');
    assert.ok(frames > 1 && frames <= 50, `frames: ${frames} (5 a second for 10 s at most)`);
  });

  it('refuses an image of more than 25 megapixels before decoding it, and an animation that would exceed 1 MiB', async () => {
    const huge = join(dir, 'huge.png');
    await run(ffmpeg, ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'color=c=red:size=6000x5000', '-frames:v', '1', huge]);
    await assert.rejects(convertToSticker(await readFile(huge)), (err: Problem) => err.status === 422 && /more than 25 megapixels/.test(err.message));
    // Noise does not compress: 3 s of it at 5 frames a second is about 2 MiB of WebP.
    const noisy = join(dir, 'noisy.gif');
    await run(ffmpeg, ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'nullsrc=size=320x320:rate=5,geq=random(1)*255:128:128', '-t', '3', noisy]);
    await assert.rejects(convertToSticker(await readFile(noisy)), (err: Problem) => err.status === 422 && /more than the 1024 KiB WhatsApp takes/.test(err.message));
  });

  it('refuses what is no image with 422 media_conversion_failed, keeping ffmpeg\'s words out of the answer', async () => {
    const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><image href="file:///etc/passwd"/></svg>');
    for (const bytes of [Buffer.from('definitely not an image'), svg, mediaFixtures.mp3.bytes()]) {
      await assert.rejects(convertToSticker(bytes), (err: unknown) => {
        assert.ok(err instanceof Problem);
        assert.equal(err.status, 422);
        assert.equal(err.code, 'media_conversion_failed');
        assert.match(err.message, /^The image could not be converted to a sticker: /);
        assert.doesNotMatch(err.message, /ffmpeg|Invalid data|\/tmp/);
        return true;
      });
    }
  });
});
