// Voice notes (spec "Send request", ptt): audio is converted with ffmpeg to Ogg Opus, mono,
// 48 kHz, which is what the network plays as a voice note. Input goes through a temporary file
// rather than stdin because some containers (MP4/M4A with the index at the end) need seeking.
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Problem } from '@switchboard/core';

export interface VoiceNoteOptions {
  /** ffmpeg is killed after this long; default 30 s. */
  timeoutMs?: number;
  /** A specific ffmpeg binary; default: `ffmpeg` on PATH, else the one from @ffmpeg-installer. */
  ffmpegPath?: string;
}

export interface VoiceNote {
  bytes: Buffer;
  /** Duration rounded to whole seconds (at least 1 for any non-empty audio). */
  seconds: number;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const STDERR_LIMIT = 2000;

export async function convertToVoiceNote(bytes: Uint8Array, opts: VoiceNoteOptions = {}): Promise<VoiceNote> {
  const ffmpeg = opts.ffmpegPath ?? (await resolveFfmpegPath());
  const dir = await mkdtemp(join(tmpdir(), 'sb-voice-'));
  try {
    const input = join(dir, 'input');
    const output = join(dir, 'voice.ogg');
    await writeFile(input, bytes, { mode: 0o600 });
    await runFfmpeg(ffmpeg, opusArguments(input, output), opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const ogg = await readFile(output);
    const seconds = oggOpusSeconds(ogg);
    if (seconds === undefined) throw conversionFailed('the converted file contains no audio');
    return { bytes: ogg, seconds: seconds > 0 ? Math.max(1, Math.round(seconds)) : 0 };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function opusArguments(input: string, output: string): string[] {
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'error', '-y',
    '-i', input,
    '-map', '0:a:0', // the first audio stream; fails when there is none
    '-map_metadata', '-1',
    '-ac', '1', '-ar', '48000',
    '-c:a', 'libopus', '-b:a', '32k', '-application', 'voip',
    '-f', 'ogg', output,
  ];
}

/** Runs ffmpeg; any failure to convert (bad input, time limit) becomes Problem 422. */
function runFfmpeg(ffmpeg: string, args: string[], timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpeg, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      if (stderr.length < STDERR_LIMIT) stderr += text.slice(0, STDERR_LIMIT - stderr.length);
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ffmpeg (${ffmpeg}): ${err.message}`)); // a server fault, not the file's
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      if (timedOut) return reject(conversionFailed(`the conversion took longer than ${Math.round(timeoutMs / 1000)} s`, stderr));
      if (code !== 0) return reject(conversionFailed('the file could not be decoded as audio', stderr));
      resolve();
    });
  });
}

/** The system ffmpeg if one is on PATH, otherwise the binary shipped in @ffmpeg-installer/ffmpeg. */
export async function resolveFfmpegPath(searchPath = process.env.PATH ?? ''): Promise<string> {
  for (const dir of searchPath.split(delimiter).filter(Boolean)) {
    const candidate = join(dir, 'ffmpeg');
    if (await access(candidate, constants.X_OK).then(() => true, () => false)) return candidate;
  }
  try {
    const installer = await import('@ffmpeg-installer/ffmpeg');
    return installer.default.path;
  } catch {
    throw new Error('ffmpeg was not found on PATH and @ffmpeg-installer/ffmpeg has no binary for this platform');
  }
}

/**
 * Duration of an Ogg Opus file from its pages: the last granule position minus the pre-skip of
 * the OpusHead header, at Opus's fixed 48 kHz. Undefined when the file is not Ogg Opus.
 */
export function oggOpusSeconds(ogg: Buffer): number | undefined {
  let offset = 0;
  let lastGranule = -1n;
  let preSkip: number | undefined;
  while (offset + 27 <= ogg.length && ogg.toString('latin1', offset, offset + 4) === 'OggS') {
    const segments = ogg[offset + 26];
    const tableEnd = offset + 27 + segments;
    if (tableEnd > ogg.length) break;
    let bodyLength = 0;
    for (let i = offset + 27; i < tableEnd; i++) bodyLength += ogg[i];
    if (preSkip === undefined && ogg.toString('latin1', tableEnd, tableEnd + 8) === 'OpusHead') {
      preSkip = ogg.readUInt16LE(tableEnd + 10);
    }
    const granule = ogg.readBigInt64LE(offset + 6);
    if (granule >= 0n) lastGranule = granule;
    offset = tableEnd + bodyLength;
  }
  if (preSkip === undefined || lastGranule <= 0n) return undefined;
  return Math.max(0, Number(lastGranule) - preSkip) / 48_000;
}

function conversionFailed(reason: string, ffmpegOutput?: string): Problem {
  const problem = new Problem(422, 'media_conversion_failed', `The audio could not be converted to a voice note: ${reason}.`, [
    { path: 'base64', message: reason },
  ]);
  // ffmpeg's own words stay out of the response but are kept for the server's logs.
  if (ffmpegOutput) Object.assign(problem, { cause: ffmpegOutput.trim() });
  return problem;
}
