// Voice notes (spec "Send request", ptt): audio is converted with ffmpeg to Ogg Opus, mono,
// 48 kHz, which is what the network plays as a voice note.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Problem } from '@switchboard/core';
import { SELF_CONTAINED_INPUT, conversionProblem, resolveFfmpegPath, runFfmpeg, withInputFile, type FfmpegOptions } from './ffmpeg.ts';
import { wholeSeconds } from './duration.ts';

export type VoiceNoteOptions = FfmpegOptions;

export interface VoiceNote {
  bytes: Buffer;
  /** Duration rounded to whole seconds (at least 1 for any non-empty audio). */
  seconds: number;
  /** The loudness the recipient's app draws: WAVEFORM_BARS values of 0–100. */
  waveform: Uint8Array;
}

/** Bars of a voice note's waveform, as WhatsApp's apps make it. */
export const WAVEFORM_BARS = 64;
/** The waveform is read from the loudness of the audio (its rectified samples, resampled: an
 *  envelope) at this rate, mono, 16-bit: an hour is 2.9 MB, where the audio itself would be 58. */
const WAVEFORM_SAMPLE_RATE = 400;

const DEFAULT_TIMEOUT_MS = 30_000;

export async function convertToVoiceNote(bytes: Uint8Array, opts: VoiceNoteOptions = {}): Promise<VoiceNote> {
  const ffmpeg = opts.ffmpegPath ?? (await resolveFfmpegPath());
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const { ogg, pcm } = await withInputFile(bytes, async (input, dir) => {
    const output = join(dir, 'voice.ogg');
    const samples = join(dir, 'samples.raw');
    const run = await runFfmpeg(ffmpeg, opusArguments(input, output, samples), { timeoutMs, slots: opts.slots });
    if (run.timedOut) throw conversionFailed(`the conversion took longer than ${Math.round(timeoutMs / 1000)} s`, run.stderr);
    if (run.code !== 0) throw conversionFailed('the file could not be decoded as audio', run.stderr);
    return { ogg: await readFile(output), pcm: await readFile(samples) };
  });
  const seconds = oggOpusSeconds(ogg);
  if (seconds === undefined) throw conversionFailed('the converted file contains no audio');
  return { bytes: ogg, seconds: wholeSeconds(seconds), waveform: waveformOf(pcm) };
}

/**
 * The mean loudness of each of WAVEFORM_BARS equal parts of 16-bit mono samples (raw, or an
 * envelope of them), scaled so the loudest part is 100 (all 0 for silence). Without it WhatsApp
 * draws a flat line.
 */
export function waveformOf(pcm: Buffer): Uint8Array {
  const samples = Math.floor(pcm.length / 2);
  const means = Array.from({ length: WAVEFORM_BARS }, (_, bar) => {
    const start = Math.floor((bar * samples) / WAVEFORM_BARS);
    const end = Math.max(start + 1, Math.floor(((bar + 1) * samples) / WAVEFORM_BARS));
    let sum = 0;
    for (let i = start; i < end && i < samples; i++) sum += Math.abs(pcm.readInt16LE(i * 2));
    return sum / (end - start);
  });
  const loudest = Math.max(...means);
  return Uint8Array.from(means, (mean) => (loudest > 0 ? Math.floor((100 * mean) / loudest) : 0));
}

/** One run, two outputs: the voice note, and the loudness of the same audio for its waveform. */
function opusArguments(input: string, output: string, samples: string): string[] {
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'error', '-y',
    ...SELF_CONTAINED_INPUT,
    '-i', input,
    '-map', '0:a:0', // the first audio stream; fails when there is none
    '-map_metadata', '-1',
    '-ac', '1', '-ar', '48000',
    '-c:a', 'libopus', '-b:a', '32k', '-application', 'voip',
    '-f', 'ogg', output,
    '-map', '0:a:0',
    '-af', `aeval=abs(val(ch)):c=same,aresample=${WAVEFORM_SAMPLE_RATE}`,
    '-ac', '1',
    '-f', 's16le', samples,
  ];
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
  return conversionProblem('The audio could not be converted to a voice note', reason, ffmpegOutput);
}
