// Stickers (spec "Send request", type sticker): WhatsApp shows only WebP stickers of 512×512
// pixels. A sticker sent as WebP goes out as it is; one sent as another common image format is
// converted with ffmpeg, fitted into 512×512 on a transparent background (an animated GIF stays
// animated, for at most 10 s).
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

/** The image as a 512×512 WebP sticker; 422 `media_conversion_failed` when it cannot be decoded. */
export async function convertToSticker(bytes: Uint8Array, opts: FfmpegOptions = {}): Promise<Buffer> {
  const ffmpeg = opts.ffmpegPath ?? (await resolveFfmpegPath());
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return withInputFile(bytes, async (input, dir) => {
    const output = join(dir, 'sticker.webp');
    const run = await runFfmpeg(ffmpeg, webpArguments(input, output), { timeoutMs, slots: opts.slots });
    if (run.timedOut) throw conversionFailed(`the conversion took longer than ${Math.round(timeoutMs / 1000)} s`, run.stderr);
    if (run.code !== 0) throw conversionFailed('the file could not be decoded as a PNG, JPEG, GIF, BMP or TIFF image', run.stderr);
    return readFile(output);
  });
}

function webpArguments(input: string, output: string): string[] {
  const fit = `scale=${SIDE}:${SIDE}:force_original_aspect_ratio=decrease,format=rgba,pad=${SIDE}:${SIDE}:(ow-iw)/2:(oh-ih)/2:color=0x00000000`;
  return [
    '-hide_banner', '-nostdin', '-loglevel', 'error', '-y',
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
