// convertToVoiceNote against real ffmpeg, checked with ffprobe (Debian's ffmpeg package).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Problem } from '@switchboard/core';
import { makeWav, mediaFixtures } from '../../../test/fixtures/media/index.ts';
import { convertToVoiceNote, oggOpusSeconds, waveformOf } from '../src/media/voice-note.ts';
import { resolveFfmpegPath } from '../src/media/ffmpeg.ts';
import { openFfmpegScratch } from './ffmpeg-scratch.ts';

const run = promisify(execFile);

interface Probe {
  streams: { codec_name: string; sample_rate: string; channels: number }[];
  format: { format_name: string; duration: string };
}

describe('voice notes (convertToVoiceNote)', function () {
  this.timeout(30_000);
  let dir: string;
  let ffmpeg: string;

  before(async () => {
    ({ dir, ffmpeg } = await openFfmpegScratch('sb-voice-test-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function probe(bytes: Buffer): Promise<Probe> {
    const file = join(dir, `probe-${Math.random().toString(36).slice(2)}.ogg`);
    await writeFile(file, bytes);
    const { stdout } = await run('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,sample_rate,channels:format=format_name,duration', '-of', 'json', file]);
    return JSON.parse(stdout) as Probe;
  }

  function assertVoiceNote(p: Probe): void {
    assert.equal(p.streams.length, 1);
    assert.equal(p.streams[0].codec_name, 'opus');
    assert.equal(p.streams[0].sample_rate, '48000');
    assert.equal(p.streams[0].channels, 1);
    assert.equal(p.format.format_name, 'ogg');
  }

  it('converts a stereo 44.1 kHz WAV to Ogg Opus, mono, 48 kHz, with its duration', async () => {
    const note = await convertToVoiceNote(makeWav(2, 44_100, 2));
    const p = await probe(note.bytes);
    assertVoiceNote(p);
    assert.equal(note.seconds, 2);
    assert.ok(Math.abs(Number(p.format.duration) - 2) < 0.1, `ffprobe duration ${p.format.duration}`);
    assert.ok(Math.abs(oggOpusSeconds(note.bytes)! - 2) < 0.05);
  });

  it('draws the waveform of the converted audio: 64 bars of 0–100, the loudest part 100', async () => {
    // One second of a tone, then one second of silence: loud bars first, then nothing.
    const tone = join(dir, 'tone-then-silence.wav');
    await run(ffmpeg, ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=duration=1', '-f', 'lavfi', '-i', 'anullsrc=duration=1:sample_rate=44100:channel_layout=mono', '-filter_complex', '[0:a][1:a]concat=n=2:v=0:a=1', tone]);
    const note = await convertToVoiceNote(await readFile(tone));
    assert.equal(note.waveform.length, 64);
    assert.equal(Math.max(...note.waveform), 100);
    assert.ok(note.waveform.slice(4, 28).every((bar) => bar >= 80), `loud first half: ${note.waveform}`);
    assert.ok(note.waveform.slice(36).every((bar) => bar <= 2), `silent second half: ${note.waveform}`);
  });

  it('waveformOf: equal parts of 16-bit samples, scaled to the loudest; silence is all 0', () => {
    const pcm = Buffer.alloc(64 * 10 * 2);
    for (let bar = 0; bar < 64; bar++) for (let i = 0; i < 10; i++) pcm.writeInt16LE((i % 2 ? -1 : 1) * bar * 100, (bar * 10 + i) * 2);
    assert.deepEqual([...waveformOf(pcm)], Array.from({ length: 64 }, (_, bar) => Math.floor((100 * bar) / 63)));
    assert.deepEqual([...waveformOf(Buffer.alloc(1000))], Array(64).fill(0));
    // Fewer samples than bars (a very short note): each bar shows the sample it falls on.
    const three = Buffer.alloc(6);
    [100, 200, 300].forEach((v, i) => three.writeInt16LE(v, i * 2));
    assert.deepEqual([...waveformOf(three)], Array.from({ length: 64 }, (_, bar) => [33, 66, 100][Math.floor((bar * 3) / 64)]));
  });

  it('converts an MP3', async () => {
    const wav = join(dir, 'tone.wav');
    const mp3 = join(dir, 'tone.mp3');
    await writeFile(wav, makeWav(3, 22_050, 1, 660));
    await run(ffmpeg, ['-hide_banner', '-loglevel', 'error', '-y', '-i', wav, '-c:a', 'libmp3lame', '-b:a', '64k', mp3]);
    const note = await convertToVoiceNote(await readFile(mp3));
    assertVoiceNote(await probe(note.bytes));
    assert.equal(note.seconds, 3);
  });

  it('converts the audio of the sample fixtures (MP3, Ogg Opus, and the audio track of an MP4)', async () => {
    for (const f of [mediaFixtures.mp3, mediaFixtures.ogg, mediaFixtures.mp4]) {
      const note = await convertToVoiceNote(f.bytes());
      assertVoiceNote(await probe(note.bytes));
      assert.equal(note.seconds, 1, f.path);
    }
  });

  it('works with the ffmpeg binary shipped in @ffmpeg-installer (the fallback when none is on PATH)', async () => {
    const bundled = await resolveFfmpegPath('');
    assert.match(bundled, /@ffmpeg-installer/);
    const note = await convertToVoiceNote(makeWav(1, 16_000, 1), { ffmpegPath: bundled });
    assertVoiceNote(await probe(note.bytes));
    assert.equal(note.seconds, 1);
  });

  it('converts audio in the other containers ffmpeg reads (M4A, ADTS AAC, FLAC, WebM, Matroska, Ogg Vorbis, AIFF, CAF, WMA, AVI, MPEG-TS, WavPack, AU, VOC, NUT, TTA)', async function () {
    this.timeout(120_000); // 32 ffmpeg runs: 10 s on a quiet 2-core machine, over 30 s beside the other test files
    for (const [ext, codec] of [['m4a', 'aac'], ['aac', 'aac'], ['flac', 'flac'], ['webm', 'libopus'], ['mkv', 'libvorbis'], ['ogg', 'libvorbis'], ['aiff', 'pcm_s16be'], ['caf', 'pcm_s16le'], ['wma', 'wmav2'], ['avi', 'libmp3lame'], ['ts', 'mp2'], ['wv', 'wavpack'], ['au', 'pcm_s16be'], ['voc', 'pcm_u8'], ['nut', 'pcm_s16le'], ['tta', 'tta']]) {
      const file = join(dir, `tone.${ext}`);
      await run(ffmpeg, ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=duration=2', '-ar', '48000', '-c:a', codec, file]);
      const note = await convertToVoiceNote(await readFile(file));
      assertVoiceNote(await probe(note.bytes));
      assert.equal(note.seconds, 2, ext);
    }
  });

  it('refuses a playlist naming a local audio file (422), with the system ffmpeg and the bundled one', async () => {
    const secret = join(dir, 'someone-elses.mp3');
    await run(ffmpeg, ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=duration=2', '-c:a', 'libmp3lame', secret]);
    const playlists = [secret, `file:${secret}`].map((segment) => Buffer.from(`#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n${segment}\n#EXT-X-ENDLIST\n`));
    for (const ffmpegPath of [ffmpeg, await resolveFfmpegPath('')]) {
      for (const playlist of playlists) {
        await assert.rejects(convertToVoiceNote(playlist, { ffmpegPath }), (err: unknown) => {
          assert.ok(err instanceof Problem, String(err));
          assert.equal(err.status, 422);
          assert.equal(err.code, 'media_conversion_failed');
          return true;
        }, `${ffmpegPath}: ${playlist.toString()}`);
      }
    }
  });

  for (const [label, bytes] of [
    ['garbage bytes', Buffer.from('this is not audio at all, just some text '.repeat(50))],
    ['a file without an audio stream (PNG image)', Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64')],
    ['an empty file', Buffer.alloc(0)],
  ] as const) {
    it(`answers 422 media_conversion_failed for ${label}`, async () => {
      await assert.rejects(convertToVoiceNote(bytes), (err: unknown) => {
        assert.ok(err instanceof Problem, String(err));
        assert.equal(err.status, 422);
        assert.equal(err.code, 'media_conversion_failed');
        return true;
      });
    });
  }

  it('kills ffmpeg at the time limit and answers 422', async () => {
    await assert.rejects(convertToVoiceNote(makeWav(30, 48_000, 2), { timeoutMs: 1 }), (err: unknown) => {
      assert.ok(err instanceof Problem);
      assert.equal(err.status, 422);
      assert.match(err.detail, /longer than/);
      return true;
    });
  });

  it('a missing ffmpeg binary is a server fault, not a 422', async () => {
    await assert.rejects(convertToVoiceNote(makeWav(1, 8000, 1), { ffmpegPath: join(dir, 'no-such-ffmpeg') }), (err: unknown) => {
      assert.ok(!(err instanceof Problem));
      assert.match(String(err), /cannot run ffmpeg/);
      return true;
    });
  });

  it('oggOpusSeconds refuses what is not Ogg Opus', () => {
    assert.equal(oggOpusSeconds(Buffer.from('OggS but not really')), undefined);
    assert.equal(oggOpusSeconds(makeWav(1, 8000, 1)), undefined);
  });
});
