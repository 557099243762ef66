import type { z } from '@hono/zod-openapi';
import { ApiError, notFound } from '../http/errors.ts';
import { first, rows, sql, type Db } from '../platform/db.ts';
import type { videoSchema } from './schemas.ts';
import { iso } from './schemas.ts';

/**
 * Agent videos. Only plain video files are accepted (what the presigned upload produces): an http(s) URL whose path
 * names a video file. Streaming manifests (HLS `.m3u8`, DASH `.mpd`) and anything that is not a video file are
 * refused, because the front end plays them with a plain <video> element. The host is not checked: contract.md
 * refuses HLS and non-video URLs only, and only an admin registers videos (a file on a CDN the seller already uses is
 * theirs to link; review 106 asked for our storage only, which would break a client written to the contract).
 */

export type Video = z.infer<typeof videoSchema>;

export const VIDEO_EXTENSIONS = ['mp4', 'm4v', 'webm', 'mov', 'ogv'];
const MANIFEST_EXTENSIONS = ['m3u8', 'm3u', 'mpd'];

function invalidUrl(message: string): ApiError {
  return new ApiError('VALIDATION_ERROR', message, { issues: [{ path: 'url', message }] });
}

/** The URL's last path segment, percent-decoded; a malformed %-escape (`%zz`) is a 400 like any malformed URL. */
function fileName(url: URL): string {
  try {
    return decodeURIComponent(url.pathname.split('/').pop() ?? '');
  } catch {
    throw invalidUrl('url must be an absolute http(s) URL (it has a malformed %-escape)');
  }
}

/** Returns the normalized URL or throws 400 naming the reason. */
export function checkVideoUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidUrl('url must be an absolute http(s) URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw invalidUrl('url must be an absolute http(s) URL');
  if (url.username || url.password) throw invalidUrl('url must not carry credentials');
  const file = fileName(url).toLowerCase();
  const ext = file.includes('.') ? file.slice(file.lastIndexOf('.') + 1) : '';
  // A query naming the manifest format (`?format=m3u8`, `?type=application/x-mpegURL`) asks the server for one, whatever
  // the file name says (review 106: only `.m3u8` with its dot was looked for).
  if (MANIFEST_EXTENSIONS.includes(ext) || /mpegurl|m3u8/i.test(url.search)) {
    throw invalidUrl('Streaming manifests (HLS .m3u8, DASH .mpd) are not supported: register a plain video file');
  }
  if (!VIDEO_EXTENSIONS.includes(ext)) {
    throw invalidUrl(`url must point to a video file (${VIDEO_EXTENSIONS.map((e) => `.${e}`).join(', ')})`);
  }
  return url.toString();
}

interface Row {
  id: string;
  agentId: string;
  url: string;
  title: string | null;
  createdAt: Date | string;
}
const columns = sql`id, agent_id as "agentId", url, title, created_at as "createdAt"`;
const toVideo = (r: Row): Video => ({ ...r, createdAt: iso(r.createdAt) });

export async function listVideos(db: Db, agentId: string): Promise<Video[]> {
  const found = await rows<Row>(
    db,
    sql`select ${columns} from public.agent_videos where agent_id = ${agentId} order by created_at desc, id desc`,
  );
  return found.map(toVideo);
}

export async function registerVideo(db: Db, agentId: string, input: { url: string; title?: string | undefined }, now: Date): Promise<Video> {
  const url = checkVideoUrl(input.url);
  const row = await first<Row>(
    db,
    sql`insert into public.agent_videos (agent_id, url, title, created_at)
        select id, ${url}, ${input.title || null}, ${now} from public.agents where id = ${agentId}
        returning ${columns}`,
  );
  if (!row) throw notFound('Agent', { agentId });
  return toVideo(row);
}

export async function deleteVideo(db: Db, agentId: string, videoId: string): Promise<{ id: string }> {
  const row = await first<{ id: string }>(
    db,
    sql`delete from public.agent_videos where id = ${videoId} and agent_id = ${agentId} returning id`,
  );
  if (!row) throw notFound('Video', { videoId });
  return row;
}
