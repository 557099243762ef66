import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream, type ReadStream } from 'node:fs';
import { link, mkdir, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { FileExistsError, FileSizeError, FileTooLargeError, STORAGE_KEY_PATTERN, type FileStore } from './storage.ts';

/**
 * The local file store behind LocalStorage (Node only: the Node entry and tests inject it; the edge never
 * imports this file). Writes go to a temporary file and are linked into place only when complete and of a size the
 * URL allows, so a reader never sees half an upload and a refused one leaves nothing behind. A key is written once:
 * the link fails when the key holds a file, so a replay of the URL (an empty body included) cannot replace what was
 * stored and served as immutable (review 72).
 */
export function diskFileStore(root: string): FileStore {
  const base = resolve(root);
  const pathOf = (key: string) => {
    if (!STORAGE_KEY_PATTERN.test(key)) throw new Error('invalid storage key');
    const full = resolve(base, key);
    if (!full.startsWith(base + sep)) throw new Error('invalid storage key');
    return full;
  };

  /** The stored file of a key with its size, or undefined (no such file, or a key outside the root). */
  const storedFile = async (key: string): Promise<{ full: string; size: number } | undefined> => {
    let full: string;
    try {
      full = pathOf(key);
    } catch {
      return undefined;
    }
    const info = await stat(full).catch(() => undefined);
    return info?.isFile() ? { full, size: info.size } : undefined;
  };
  return {
    async write(key, body, { maxBytes, exact }) {
      const target = pathOf(key);
      await mkdir(dirname(target), { recursive: true });
      // A name of its own per write, created exclusively: two PUTs of one URL in the same millisecond wrote into one
      // temporary file, and the second's rename failed (a 500) after the first had stored both bodies mixed (review 37).
      const temp = `${target}.${randomUUID()}.part`;
      const out = createWriteStream(temp, { flags: 'wx' });
      let written = 0;
      try {
        const reader = body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          written += value.byteLength;
          if (written > maxBytes) {
            await reader.cancel().catch(() => {});
            throw new FileTooLargeError(maxBytes);
          }
          if (!out.write(value)) await new Promise<void>((r) => out.once('drain', () => r()));
        }
        await new Promise<void>((res, rej) => out.end((err?: Error | null) => (err ? rej(err) : res())));
        if (written === 0 || (exact && written !== maxBytes)) throw new FileSizeError(written, exact ? maxBytes : undefined);
        await link(temp, target).catch((err: NodeJS.ErrnoException) => {
          throw err.code === 'EEXIST' ? new FileExistsError() : err;
        });
        return written;
      } catch (err) {
        out.destroy();
        throw err;
      } finally {
        await rm(temp, { force: true });
      }
    },
    async size(key) {
      return (await storedFile(key))?.size;
    },
    async read(key, range) {
      const file = await storedFile(key);
      if (!file) return undefined;
      const { full, size } = file;
      return { body: openedOnFirstRead(() => (range ? createReadStream(full, { start: range.start, end: range.end }) : createReadStream(full))), size };
    },
  };
}

/**
 * A body that opens its file when it is first read and closes it when read to the end or cancelled. A file opened with
 * the response stayed open whenever the body was never read: Hono answers a HEAD by running the GET route and dropping
 * its body unread, and each anonymous HEAD of a public upload left a descriptor open until the process could accept
 * no more connections (review 37). highWaterMark 0: nothing is pulled (so nothing opened) before a reader asks.
 */
function openedOnFirstRead(open: () => ReadStream): ReadableStream<Uint8Array> {
  let file: ReadStream | undefined;
  let chunks: AsyncIterator<Buffer> | undefined;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        file ??= open();
        chunks ??= file[Symbol.asyncIterator]();
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(new Uint8Array(next.value.buffer, next.value.byteOffset, next.value.byteLength));
      },
      cancel() {
        file?.destroy();
      },
    },
    { highWaterMark: 0 },
  );
}

export const defaultUploadsDir = (dataDir: string) => join(dataDir, 'uploads');
