// Running ffmpeg on a file a client sent: voice notes, stickers and media durations. Input goes
// through a private temporary file rather than stdin because some containers (MP4/M4A with the
// index at the end) need seeking.
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Problem } from '@switchboard/core';

/** The demuxers a client's file may be read with: audio and video containers that hold their
 *  media themselves. Playlists and scripts (HLS, concat, image sequences…) are refused, since
 *  they name other files: an HLS playlist could otherwise have a local file with a media
 *  extension converted into a voice note and sent to its author. Names as ffmpeg lists them. */
const CONTAINED_MEDIA_DEMUXERS = [
  // audio
  'mp3', 'aac', 'loas', 'ogg', 'flac', 'wav', 'w64', 'aiff', 'caf', 'au', 'voc', 'amr', 'amrnb',
  'amrwb', 'wv', 'ape', 'tta', 'tak', 'mpc', 'mpc8', 'ac3', 'eac3', 'dts', 'mlp', 'truehd', 'gsm',
  'qcp', 'dsf', 'xwma', 'rm',
  // audio and video containers
  'mov,mp4,m4a,3gp,3g2,mj2', 'matroska,webm', 'asf', 'avi', 'flv', 'mpeg', 'mpegts', 'nut', 'mxf',
  'dv', 'ivf', 'h264', 'hevc', 'm4v', 'mpegvideo',
].join(',');

/** Input options: the file may open nothing but files, and only be read as a self-contained
 *  audio or video container. No requests from inside the cluster on a client's behalf, and no
 *  local file but the client's own, whatever ffmpeg build is installed. */
export const SELF_CONTAINED_INPUT = ['-protocol_whitelist', 'file', '-format_whitelist', CONTAINED_MEDIA_DEMUXERS];

/** At most `limit` ffmpeg processes at once; the rest wait their turn. A burst of voice notes
 *  would otherwise start one CPU-bound conversion per request and starve the event loop's host. */
export class FfmpegSlots {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  async use<T>(work: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next(); // the slot passes straight to the next in line
      else this.running--;
    }
  }
}

/** The gateway process's slots: one ffmpeg per core. */
const processSlots = new FfmpegSlots(availableParallelism());

export interface FfmpegOptions {
  /** ffmpeg is killed after this long (waiting for a slot does not count). */
  timeoutMs?: number;
  /** Where ffmpeg runs take turns; default: the process's, one per core. */
  slots?: FfmpegSlots;
  /** A specific ffmpeg binary; default: `ffmpeg` on PATH, else the one from @ffmpeg-installer. */
  ffmpegPath?: string;
}

export interface FfmpegRun {
  /** Exit code; null when it was killed. */
  code: number | null;
  timedOut: boolean;
  /** The start of what ffmpeg wrote to stderr (its diagnostics). */
  stderr: string;
}

/** Calls `use` with the path of a temporary file holding `bytes` and a directory for outputs;
 *  both are removed afterwards. */
export async function withInputFile<T>(bytes: Uint8Array, use: (input: string, dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'sb-media-'));
  try {
    const input = join(dir, 'input');
    await writeFile(input, bytes, { mode: 0o600 });
    return await use(input, dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Runs ffmpeg, once a slot is free, to its end or its time limit, keeping the first
 *  `stderrLimit` characters of its diagnostics. Rejects only when ffmpeg cannot be started at
 *  all, which is the server's fault, not the file's. */
export function runFfmpeg(ffmpeg: string, args: string[], run: { timeoutMs: number; stderrLimit?: number; slots?: FfmpegSlots }): Promise<FfmpegRun> {
  return (run.slots ?? processSlots).use(() => spawnFfmpeg(ffmpeg, args, run.timeoutMs, run.stderrLimit ?? 4000));
}

function spawnFfmpeg(ffmpeg: string, args: string[], timeoutMs: number, stderrLimit: number): Promise<FfmpegRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpeg, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      if (stderr.length < stderrLimit) stderr += text.slice(0, stderrLimit - stderr.length);
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ffmpeg (${ffmpeg}): ${err.message}`));
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, timedOut, stderr });
    });
  });
}

/** Binaries found, by the PATH searched: every audio or video send needs one. */
const resolvedPaths = new Map<string, Promise<string>>();

/** The system ffmpeg if one is on PATH, otherwise the binary shipped in @ffmpeg-installer/ffmpeg. */
export function resolveFfmpegPath(searchPath = process.env.PATH ?? ''): Promise<string> {
  let found = resolvedPaths.get(searchPath);
  if (!found) {
    found = findFfmpeg(searchPath);
    resolvedPaths.set(searchPath, found);
    found.catch(() => resolvedPaths.delete(searchPath)); // not found: look again next time
  }
  return found;
}

async function findFfmpeg(searchPath: string): Promise<string> {
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

/** 422 `media_conversion_failed`: a client's file that ffmpeg could not convert. ffmpeg's own
 *  words stay out of the response but are kept (as `cause`) for the server's logs. */
export function conversionProblem(what: string, reason: string, ffmpegOutput?: string): Problem {
  const problem = new Problem(422, 'media_conversion_failed', `${what}: ${reason}.`, [{ path: 'base64', message: reason }]);
  if (ffmpegOutput) Object.assign(problem, { cause: ffmpegOutput.trim() });
  return problem;
}
