// The dashboard's static files, read once from services/dashboard/public into memory. Only files
// found here are ever served, so a request path can never reach outside the folder.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, extname, join, relative, sep } from 'node:path';
import { createRequire } from 'node:module';

/** Found through the package (its entry is src/index.ts), not beside this file: in a built
 *  process (dist/) this code is no longer in services/dashboard. */
export const PUBLIC_DIR = join(dirname(createRequire(import.meta.url).resolve('@switchboard/dashboard')), '..', 'public');

export interface Asset {
  body: Buffer;
  contentType: string;
  /** Strong validator: a hash of the content, so a changed file always gets a new ETag. */
  etag: string;
}

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.webmanifest': 'application/manifest+json',
  '.txt': 'text/plain; charset=utf-8',
};

export function contentTypeFor(fileName: string): string {
  return CONTENT_TYPES[extname(fileName).toLowerCase()] ?? 'application/octet-stream';
}

/** Every file under `dir`, keyed by its URL path relative to the folder ("js/app.js"). */
export function loadAssets(dir: string = PUBLIC_DIR): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const file of listFiles(dir)) {
    const body = readFileSync(file);
    const urlPath = relative(dir, file).split(sep).join('/');
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
    assets.set(urlPath, { body, contentType: contentTypeFor(file), etag });
  }
  return assets;
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name.startsWith('.')) return [];
    const full = join(dir, entry.name);
    return entry.isDirectory() ? listFiles(full) : [full];
  });
}
