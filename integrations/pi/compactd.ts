/**
 * pi extension: pi's compaction summary comes from compactd.
 *
 * On `session_before_compact` it posts the messages pi is about to drop, untruncated (pi's own
 * summarizer sees tool output cut at 2,000 characters), to compactd's session API in pi's own
 * message shape, asks compactd to compact them all (`tail=false`: pi keeps its own recent
 * turns), and returns compactd's summary as pi's compaction. By default compactd answers at once
 * (`wait=instant`: the deterministic checkpoint; the model's narrative is refined in the
 * background and carried into the next compaction); COMPACTD_WAIT=model waits for the model. When compactd is not reachable
 * (a short health check) or fails, it returns nothing and pi compacts as it always does.
 *
 * Install: `compactd integrate pi` copies it to the project's .pi/extensions/ (`--global`:
 * ~/.pi/agent/extensions/), where pi finds it, with compactd's URL as the default below.
 * COMPACTD_URL (default http://127.0.0.1:7433), COMPACTD_API_KEY, COMPACTD_TIMEOUT_MS,
 * COMPACTD_WAIT (instant, the default, or model).
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

const BASE = (process.env.COMPACTD_URL ?? "http://127.0.0.1:7433").replace(/\/+$/, "");
const HEALTH_TIMEOUT_MS = 2_000; // compactd runs on this machine: it answers at once or not at all
const COMPACT_TIMEOUT_MS = Number(process.env.COMPACTD_TIMEOUT_MS ?? 900_000); // wait=model on a CPU: minutes
const WAIT = process.env.COMPACTD_WAIT === "model" ? "model" : "instant";

async function call(path: string, init: RequestInit, timeoutMs: number, signal?: AbortSignal): Promise<any> {
  const limit = AbortSignal.timeout(timeoutMs);
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (process.env.COMPACTD_API_KEY) headers.authorization = `Bearer ${process.env.COMPACTD_API_KEY}`;
  const res = await fetch(BASE + path, { ...init, headers, signal: signal ? AbortSignal.any([limit, signal]) : limit });
  if (!res.ok) throw new Error(`compactd ${path}: ${res.status} ${(await res.text()).slice(0, 200)}`);
  return res.json();
}

/** Whether pi's previous summary is the one compactd returned last for this session (the latest
 * checkpoint, or the instant one the latest refines: what pi got before the model's narrative). */
async function ours(session: string, previous: string): Promise<boolean> {
  const same = (cp: any) => typeof cp.summary_text === "string" && previous.trim().startsWith(cp.summary_text.trim());
  try {
    const cp = await call(`/v1/sessions/${session}/checkpoint`, { method: "GET" }, HEALTH_TIMEOUT_MS);
    if (same(cp)) return true;
    if (!cp.refines) return false;
    return same(await call(`/v1/sessions/${session}/checkpoint?version=${cp.refines}`, { method: "GET" },
                           HEALTH_TIMEOUT_MS));
  } catch {
    return false;
  }
}

export default function (pi: ExtensionAPI) {
  pi.on("session_before_compact", async (event, ctx) => {
    const prep = event.preparation;
    try {
      await call("/health", { method: "GET" }, HEALTH_TIMEOUT_MS);
    } catch {
      return undefined; // not reachable: pi's own compaction
    }
    try {
      const session = encodeURIComponent(`pi-${ctx.sessionManager.getSessionId()}`);
      const stamp = Date.now();
      // pi's session-file entries, chained by parentId (compactd's importer follows the chain).
      const records: { type: string; id: string; parentId: string | null; message: unknown }[] = [];
      const add = (id: string, message: unknown) =>
        records.push({ type: "message", id, parentId: records.length ? records[records.length - 1].id : null, message });
      // A previous summary compactd did not write (pi's own) is the anchor of what follows.
      if (prep.previousSummary && !(await ours(session, prep.previousSummary))) {
        add(`c${stamp}-prev`, { role: "compactionSummary", summary: prep.previousSummary });
      }
      const dropped = [...prep.messagesToSummarize, ...(prep.isSplitTurn ? prep.turnPrefixMessages : [])];
      dropped.forEach((message, i) => add(`c${stamp}-${i}`, message));
      if (records.length === 0) return undefined;
      await call(`/v1/sessions/${session}/messages?format=pi`, { method: "POST", body: JSON.stringify(records) },
                 COMPACT_TIMEOUT_MS, event.signal);
      const result = await call(`/v1/sessions/${session}/compact?tail=false&wait=${WAIT}`, { method: "POST" },
                                COMPACT_TIMEOUT_MS, event.signal);
      const summary: string = result.checkpoint.summary_text;
      const modified = new Set([...prep.fileOps.edited, ...prep.fileOps.written]);
      return {
        compaction: {
          summary,
          firstKeptEntryId: prep.firstKeptEntryId,
          tokensBefore: prep.tokensBefore,
          details: {
            source: "compactd", version: result.checkpoint_version,
            readFiles: [...prep.fileOps.read].filter((f) => !modified.has(f)).sort(),
            modifiedFiles: [...modified].sort(),
          },
        },
      };
    } catch (err) {
      if (ctx.hasUI) ctx.ui.notify(`compactd failed, pi compacts itself: ${err}`, "warning");
      return undefined;
    }
  });
}
