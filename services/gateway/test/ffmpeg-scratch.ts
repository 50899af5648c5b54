// What the ffmpeg tests share: a scratch folder, the ffmpeg the gateway would run, and a check
// that ffprobe (which they read their results with) is installed.
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { resolveFfmpegPath } from '../src/media/ffmpeg.ts';

export async function openFfmpegScratch(prefix: string): Promise<{ dir: string; ffmpeg: string }> {
  await promisify(execFile)('ffprobe', ['-version']).catch(() => {
    throw new Error('ffprobe is needed by this test: apt-get install -y ffmpeg (make system-deps)');
  });
  return { dir: await mkdtemp(join(tmpdir(), prefix)), ffmpeg: await resolveFfmpegPath() };
}
