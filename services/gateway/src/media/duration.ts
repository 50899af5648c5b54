// The playing time of an audio or video file a client sends, so the recipient sees it before
// downloading (WhatsApp shows the `seconds` of the message) and our records carry it. Best
// effort: a file ffmpeg cannot read still goes out, without a duration, as it did before.
import { SELF_CONTAINED_INPUT, resolveFfmpegPath, runFfmpeg, withInputFile, type FfmpegOptions } from './ffmpeg.ts';

const DEFAULT_TIMEOUT_MS = 10_000;
// Generous: the input's metadata tags are printed before its duration.
const PROBE_OUTPUT_LIMIT = 64 * 1024;

/** Whole seconds (at least 1 for anything that plays), or undefined when ffmpeg cannot tell —
 *  or cannot run: the send does not depend on it. */
export async function mediaSeconds(bytes: Uint8Array, opts: FfmpegOptions = {}): Promise<number | undefined> {
  try {
    const ffmpeg = opts.ffmpegPath ?? (await resolveFfmpegPath());
    // Without an output ffmpeg only describes its input (and exits with 1, which is expected).
    const run = await withInputFile(bytes, (input) =>
      runFfmpeg(ffmpeg, ['-hide_banner', '-nostdin', ...SELF_CONTAINED_INPUT, '-i', input], { timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, stderrLimit: PROBE_OUTPUT_LIMIT, slots: opts.slots }),
    );
    return run.timedOut ? undefined : durationSeconds(run.stderr);
  } catch {
    return undefined;
  }
}

/** The `Duration: HH:MM:SS.ss` of ffmpeg's description of its input, in whole seconds. */
export function durationSeconds(ffmpegOutput: string): number | undefined {
  // Anchored to ffmpeg's own line, so a metadata tag of the file cannot supply it.
  const m = /^ {2}Duration: (\d+):(\d{2}):(\d{2}(?:\.\d+)?)/m.exec(ffmpegOutput);
  if (!m) return undefined;
  return wholeSeconds(Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3])) || undefined;
}

/** A playing time as the network shows it: whole seconds, at least 1 for anything that plays. */
export function wholeSeconds(seconds: number): number {
  return seconds > 0 ? Math.max(1, Math.round(seconds)) : 0;
}
