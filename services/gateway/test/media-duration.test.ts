// mediaSeconds against real ffmpeg: the playing time of audio and video sends; ffmpeg's slots.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { makeWav, mediaFixtures } from '../../../test/fixtures/media/index.ts';
import { durationSeconds, mediaSeconds } from '../src/media/duration.ts';
import { FfmpegSlots, resolveFfmpegPath } from '../src/media/ffmpeg.ts';

const run = promisify(execFile);

describe('media durations (mediaSeconds) and ffmpeg slots', function () {
  this.timeout(30_000);
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sb-duration-test-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads the length of audio, rounded to whole seconds', async () => {
    assert.equal(await mediaSeconds(makeWav(3.4, 16_000, 1)), 3);
    assert.equal(await mediaSeconds(makeWav(0.2, 16_000, 1)), 1, 'anything that plays lasts at least a second');
    assert.equal(await mediaSeconds(mediaFixtures.mp3.bytes()), 1);
  });

  it('reads the length of a video whose index is at the end of the file', async () => {
    const mp4 = join(dir, 'moov-at-end.mp4');
    // Without +faststart the mp4 index is written last: reading it needs seeking.
    await run(await resolveFfmpegPath(), ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc=duration=6:size=64x48:rate=10', '-pix_fmt', 'yuv420p', mp4]);
    assert.equal(await mediaSeconds(await readFile(mp4)), 6);
  });

  it('tells nothing, and fails nothing, for what has no playing time or cannot be read', async () => {
    assert.equal(await mediaSeconds(mediaFixtures.png.bytes()), undefined, 'a still image');
    assert.equal(await mediaSeconds(Buffer.from('not a media file at all')), undefined);
    assert.equal(await mediaSeconds(makeWav(30, 48_000, 2), { timeoutMs: 1 }), undefined, 'out of time');
    assert.equal(await mediaSeconds(makeWav(1, 8000, 1), { ffmpegPath: join(dir, 'no-such-ffmpeg') }), undefined, 'no ffmpeg');
  });

  it('tells nothing of a playlist naming a local audio file (it is not read)', async () => {
    const local = join(dir, 'local.mp3');
    await run(await resolveFfmpegPath(), ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=duration=5', '-c:a', 'libmp3lame', local]);
    assert.equal(await mediaSeconds(await readFile(local)), 5, 'the file itself has a playing time');
    assert.equal(await mediaSeconds(Buffer.from(`#EXTM3U\n#EXT-X-TARGETDURATION:5\n#EXTINF:5,\n${local}\n#EXT-X-ENDLIST\n`)), undefined);
  });

  it('parses the duration ffmpeg prints', () => {
    assert.equal(durationSeconds('  Duration: 01:02:03.60, start: 0.000000, bitrate: 63 kb/s'), 3724);
    assert.equal(durationSeconds('  Duration: N/A, bitrate: N/A'), undefined);
    assert.equal(durationSeconds('  Duration: 00:00:00.00, bitrate: N/A'), undefined);
    // A tag of the file is printed before; only ffmpeg's own line counts.
    assert.equal(durationSeconds('  Metadata:\n    comment         : Duration: 99:00:00.00\n  Duration: 00:00:05.00, start: 0'), 5);
  });

  it('runs at most `limit` ffmpeg processes at once; the rest wait their turn', async () => {
    // A stand-in ffmpeg that notes when it starts and ends.
    const log = join(dir, 'runs.log');
    const fake = join(dir, 'ffmpeg');
    await writeFile(fake, `#!/bin/sh\necho start >> '${log}'\nsleep 1\necho end >> '${log}'\necho '  Duration: 00:00:02.00' >&2\nexit 1\n`, { mode: 0o755 });
    const slots = new FfmpegSlots(2);
    const results = await Promise.all(Array.from({ length: 5 }, () => mediaSeconds(makeWav(1, 8000, 1), { ffmpegPath: fake, slots })));
    assert.deepEqual(results, [2, 2, 2, 2, 2]);
    let running = 0;
    let most = 0;
    for (const line of (await readFile(log, 'utf8')).trim().split('\n')) {
      running += line === 'start' ? 1 : -1;
      most = Math.max(most, running);
    }
    assert.equal(most, 2);
  });
});
