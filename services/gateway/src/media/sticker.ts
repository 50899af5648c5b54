// Stickers (spec "Send request", type sticker): WhatsApp shows only WebP stickers of 512×512
// pixels. A sticker sent as WebP goes out as it is; one sent as another common image format is
// converted with ffmpeg, fitted into 512×512 on a transparent background (an animated GIF stays
// animated, for at most 10 s and 1 MiB).
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { conversionProblem, resolveFfmpegPath, runFfmpeg, withInputFile, type FfmpegOptions } from './ffmpeg.ts';

/** The image formats a sticker may be sent in besides WebP, by mimetype essence. */
export const CONVERTIBLE_STICKER_MIMETYPES: ReadonlySet<string> = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/bmp', 'image/tiff']);

/** The demuxers a sticker's image may be read with: single images and GIF, nothing that names
 *  other files (image2's numbered sequences) or can reference them (SVG). Names as ffmpeg lists them. */
const STILL_IMAGE_INPUT = ['-protocol_whitelist', 'file', '-format_whitelist', 'png_pipe,jpeg_pipe,gif,gif_pipe,bmp_pipe,tiff_pipe'];

const SIDE = 512;
const MAX_ANIMATION_SECONDS = 10;
const DEFAULT_TIMEOUT_MS = 30_000;
/** Larger images are refused before they are decoded: a few hundred KB of PNG can describe an
 *  image that takes gigabytes to hold (25 megapixels, 100 MB, fits any phone photo but 48 MP ones). */
const MAX_INPUT_PIXELS = 25_000_000;
/** WhatsApp takes stickers up to about 1 MiB (its apps keep animated ones under 500 KB). */
export const MAX_STICKER_BYTES = 1024 * 1024;

/** The image as a 512×512 WebP sticker; 422 `media_conversion_failed` when it cannot be decoded. */
export async function convertToSticker(bytes: Uint8Array, opts: FfmpegOptions = {}): Promise<Buffer> {
  const ffmpeg = opts.ffmpegPath ?? (await resolveFfmpegPath());
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return withInputFile(bytes, async (input, dir) => {
    const output = join(dir, 'sticker.webp');
    const run = await runFfmpeg(ffmpeg, webpArguments(input, output), { timeoutMs, slots: opts.slots });
    if (run.timedOut) throw conversionFailed(`the conversion took longer than ${Math.round(timeoutMs / 1000)} s`, run.stderr);
    if (run.code !== 0) throw conversionFailed(failureReason(run.stderr), run.stderr);
    const sticker = await readFile(output);
    if (sticker.length > MAX_STICKER_BYTES) {
      throw conversionFailed(`the sticker would be ${Math.ceil(sticker.length / 1024)} KiB, more than the ${MAX_STICKER_BYTES / 1024} KiB WhatsApp takes; send a shorter or simpler animation`);
    }
    return sticker;
  });
}

function failureReason(ffmpegOutput: string): string {
  return /max pixel count/.test(ffmpegOutput)
    ? `the image has more than ${MAX_INPUT_PIXELS / 1_000_000} megapixels; send a smaller one`
    : 'the file could not be decoded as a PNG, JPEG, GIF, BMP or TIFF image';
}

function webpArguments(input: string, output: string): string[] {
  const fit = `scale=${SIDE}:${SIDE}:force_original_aspect_ratio=decrease,format=rgba,pad=${SIDE}:${SIDE}:(ow-iw)/2:(oh-ih)/2:color=0x00000000`;
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'error', '-y',
    '-max_pixels', String(MAX_INPUT_PIXELS),
    ...STILL_IMAGE_INPUT,
    '-i', input,
    '-map', '0:v:0', // the image; fails when the file holds none
    '-map_metadata', '-1',
    '-t', String(MAX_ANIMATION_SECONDS),
    '-vf', fit,
    '-c:v', 'libwebp', '-lossless', '0', '-q:v', '75', '-loop', '0',
    '-f', 'webp', output,
  ];
}

function conversionFailed(reason: string, ffmpegOutput?: string) {
  return conversionProblem('The image could not be converted to a sticker', reason, ffmpegOutput);
}
