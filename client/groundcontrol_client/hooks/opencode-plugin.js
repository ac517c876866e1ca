// Ground Control's OpenCode plugin: leases taken where an OpenCode agent writes.
//
// OpenCode loads it from .opencode/plugins/ (or ~/.config/opencode/plugins/) and calls its hooks
// in process; each hook is posted to Ground Control (POST $GC_URL/api/v1/hooks/opencode, key
// $GC_KEY), which reads it and answers (harnesses/formats/opencode.py has the body and answer):
//
// - a write (`write`, `edit`, `apply_patch`, and the older `multiedit`, `patch`) waits for the
//   answer: a denial is thrown, so the tool does not run and the model reads the sentence;
// - a `bash` command: the worktree's dirty files are noted before it, and after it the files it
//   changed are sent; what Ground Control says of them is appended to the command's output;
// - every other tool call, and the session's start, idle and deletion, are posted without
//   waiting: each renews what the session holds (a session whose calls stop loses its leases
//   within their TTL, GC_HOOK_TTL_S or the server's default).
//
// When a write cannot be checked (no GC_URL, Ground Control unreachable, an HTTP error, an
// answer that is no JSON, GC_HOOK_DEADLINE_S passing, default 45 s) it is refused: an unchecked
// write breaks the one-writer promise. GC_HOOK_FAIL_OPEN=1 lets it through instead.
//
// Plain JavaScript for Bun and Node, no dependencies. It exports only the plugin function:
// OpenCode refuses a plugin file with any other export.

import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const WRITING_TOOLS = new Set(["write", "edit", "multiedit", "apply_patch", "patch"]);
const SHELL_TOOLS = new Set(["bash"]);
const SESSION_EVENTS = new Set(["session.created", "session.idle", "session.deleted"]);
const DEFAULT_DEADLINE_S = 45;
const GIT_TIMEOUT_MS = 10_000;
// Shell calls whose dirty files are kept, at most (OpenCode runs no `after` for a failed call).
const MAX_SNAPSHOTS = 64;
// Paths a write's answer asks to resolve, at most a quarter of these per call.
const MAX_LOOKUPS = 16;
// Changed files sent after a shell command, at most: a body is at most 256 KiB by default
// (GC_MAX_BODY_BYTES), and the server judges the first 256 of them anyway.
const MAX_CHANGED = 1000;
// The new text a writing tool carries: Ground Control needs only the files, and a body over the
// server's limit would refuse the write.
const NEW_TEXT = new Set(["content", "oldString", "newString", "edits"]);

let directory0 = process.cwd(); // the project: where a relative path a tool names starts

export const GroundControl = async ({ directory, worktree }) => {
  if (directory) directory0 = directory;
  const top = worktree && worktree !== "/" ? worktree : null; // "/": not a git project
  const repositories = new Set(top ? spellings(top) : []);
  const snapshots = new Map(); // callID -> the dirty files before the shell command
  const parents = new Map(); // subagent session -> the session that started it

  // A subagent's (`task`) session writes as the session that started it, as it does in
  // Claude Code: otherwise the two would refuse each other's files.
  const rootOf = (session) => {
    for (let hops = 0; parents.has(session) && hops < 16; hops += 1) session = parents.get(session);
    return session;
  };

  const send = async (body, extra = {}) => {
    const facts = { repositories: [...repositories], ...ttl(), ...extra };
    return post({ ...body, directory, groundcontrol: facts });
  };

  // A write's answer. Ground Control first asks what the paths the tool writes resolve to on
  // this disk (X-GC-Resolve): each is resolved as the kernel would (links, `..` after them),
  // its repository registered, and it is asked once more with what each reaches.
  const checked = async (body) => {
    const answer = await send(body, { resolves: true });
    if (!answer.resolve.length) return answer;
    const resolved = {};
    for (const given of answer.resolve.slice(0, MAX_LOOKUPS * 4)) {
      const real = realOf(absoluteOf(given));
      resolved[given] = real;
      const found = repositoryOf(real);
      if (found) repositories.add(found);
    }
    return send(body, { resolves: true, resolved });
  };

  const quietly = (body) => {
    send(body).catch(() => {}); // renews only: nothing is refused on its answer
  };

  return {
    "tool.execute.before": async (input, output) => {
      const body = {
        hook: "tool.execute.before",
        input: { tool: input.tool, sessionID: rootOf(input.sessionID), callID: input.callID },
        output: { args: slim(output?.args) },
      };
      if (SHELL_TOOLS.has(input.tool)) {
        remember(snapshots, input.callID, top ? dirty(top) : null);
        quietly(body);
        return;
      }
      if (!WRITING_TOOLS.has(input.tool)) {
        quietly(body);
        return;
      }
      let answer;
      try {
        answer = await checked(body);
      } catch (error) {
        if (process.env.GC_HOOK_FAIL_OPEN === "1") return;
        throw new Error(
          `Ground Control could not check this write, so it is refused: ${reason(error)}`,
        );
      }
      if (typeof answer.said?.deny === "string") throw new Error(answer.said.deny);
    },

    "tool.execute.after": async (input, output) => {
      if (!SHELL_TOOLS.has(input.tool)) return;
      const before = snapshots.get(input.callID);
      snapshots.delete(input.callID);
      const body = {
        hook: "tool.execute.after",
        input: { tool: input.tool, sessionID: rootOf(input.sessionID), callID: input.callID },
        output: { title: output?.title, metadata: { exit: output?.metadata?.exit } },
      };
      let sentence;
      try {
        const now = top ? dirty(top) : null;
        const changed = before && now ? changedSince(before, now).slice(0, MAX_CHANGED) : null;
        const extra = changed ? { changed } : {};
        const answer = await send(body, extra);
        sentence = answer.said?.tell ?? answer.said?.deny;
      } catch (error) {
        const why = reason(error);
        sentence = `Ground Control could not check the files this command changed: ${why}`;
      }
      // The command ran: what is said of its writes goes into the result the model reads.
      if (typeof sentence === "string" && sentence && output) {
        output.output = output.output ? `${output.output}\n\n${sentence}` : sentence;
      }
    },

    // OpenCode does not wait for this hook, and a rejection here would be unhandled: it
    // swallows every failure (nothing can be refused at an event).
    event: async ({ event }) => {
      try {
        if (!event || !SESSION_EVENTS.has(event.type)) return;
        const properties = event.properties ?? {};
        const session = properties.sessionID ?? properties.info?.id;
        if (typeof session !== "string" || !session) return;
        const parent = properties.info?.parentID;
        if (parent) {
          // A subagent's session: its end is not the end of the session that started it.
          parents.set(session, parent);
          return;
        }
        if (parents.has(session)) return;
        const said = { type: event.type, properties: { sessionID: session } };
        await send({ hook: "event", event: said });
      } catch {
        // Nothing to refuse: the next call renews, or the session's leases lapse.
      }
    },
  };
};

// A tool's arguments without the text it writes; a patch reduced to its `*** ` lines, which
// name the files it writes.
function slim(args) {
  if (!args || typeof args !== "object") return args;
  const out = {};
  for (const [name, value] of Object.entries(args)) {
    if (NEW_TEXT.has(name)) continue;
    out[name] =
      name === "patchText" && typeof value === "string"
        ? value.split(/\r?\n/).filter((line) => line.startsWith("*** ")).join("\n")
        : value;
  }
  return out;
}

function baseUrl(given) {
  const url = (given ?? "").trim().replace(/\/+$/, "").replace(/\/api\/v1$/, "");
  return url.replace(/\/+$/, "");
}

function deadlineMs() {
  const value = Number.parseFloat(process.env.GC_HOOK_DEADLINE_S ?? "");
  return (Number.isFinite(value) ? Math.max(value, 0) : DEFAULT_DEADLINE_S) * 1000;
}

function ttl() {
  const value = Number.parseFloat(process.env.GC_HOOK_TTL_S ?? "");
  return Number.isFinite(value) ? { ttl_s: Math.min(Math.max(value, 5), 3600) } : {};
}

// The hook posted; its answer ({} for an empty body) and the paths Ground Control asks it to
// resolve (X-GC-Resolve). Throws for anything that is not an answer.
async function post(body) {
  const base = baseUrl(process.env.GC_URL);
  if (!base) throw new Error("GC_URL is not set");
  const headers = { "Content-Type": "application/json" };
  if (process.env.GC_KEY) headers.Authorization = `Bearer ${process.env.GC_KEY}`;
  const deadline = deadlineMs();
  let response;
  let text;
  try {
    response = await fetch(`${base}/api/v1/hooks/opencode`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: deadline ? AbortSignal.timeout(deadline) : undefined,
    });
    text = await response.text();
  } catch (error) {
    if (error?.name === "TimeoutError") {
      throw new Error(`no answer within ${deadline / 1000} s (GC_HOOK_DEADLINE_S)`);
    }
    throw new Error(`${base} could not be reached (${reason(error.cause ?? error)})`);
  }
  if (response.status !== 200) throw new Error(`${base} answered HTTP ${response.status}`);
  let said = {};
  if (text.trim()) {
    try {
      said = JSON.parse(text);
    } catch {
      throw new Error(`${base} answered something that is not JSON`);
    }
    if (!said || typeof said !== "object" || Array.isArray(said)) {
      throw new Error(`${base} answered JSON that is not an object`);
    }
  }
  let resolve = [];
  try {
    const listed = JSON.parse(response.headers.get("x-gc-resolve") ?? "[]");
    if (Array.isArray(listed)) resolve = listed.filter((p) => typeof p === "string");
  } catch {
    // no list: nothing to resolve
  }
  return { said, resolve };
}

function reason(error) {
  return error instanceof Error ? error.message || error.name : String(error);
}

// A repository's top level as the session spells it and as resolved: both are registered, so
// either spelling of a path is placed.
function spellings(dir) {
  const out = [dir];
  try {
    const real = fs.realpathSync(dir);
    if (real !== dir) out.push(real);
  } catch {
    // gone: the spelling given is all there is
  }
  return out;
}

function git(dir, ...args) {
  return execFileSync("git", ["-C", dir, ...args], {
    timeout: GIT_TIMEOUT_MS,
    maxBuffer: 256 * 1024 * 1024,
    stdio: ["ignore", "pipe", "ignore"],
  });
}

// The top level of the repository holding `where` (a file that may not exist yet: its nearest
// existing directory), or null.
function repositoryOf(where) {
  let dir = where;
  while (!isDirectory(dir)) {
    const up = path.dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
  try {
    return git(dir, "rev-parse", "--show-toplevel").toString("utf8").trim() || null;
  } catch {
    return null;
  }
}

// A path as the tool names it, absolute: `~` is the home, a relative one is the project's.
function absoluteOf(given) {
  if (given === "~" || given.startsWith("~/")) return path.join(os.homedir(), given.slice(1));
  return path.resolve(directory0, given);
}

// What `where` resolves to: its nearest existing ancestor's real path and the rest after it;
// a dangling link is followed to the file it would create (as Python's realpath does).
function realOf(where) {
  let dir = where;
  let rest = [];
  for (let hops = 0; hops < 64; hops += 1) {
    try {
      return path.join(fs.realpathSync(dir), ...rest);
    } catch {
      let link = null;
      try {
        if (fs.lstatSync(dir).isSymbolicLink()) link = fs.readlinkSync(dir);
      } catch {
        // not there at all: look above it
      }
      if (link !== null) {
        dir = path.resolve(path.dirname(dir), link);
        continue;
      }
      const up = path.dirname(dir);
      if (up === dir) return where;
      rest = [path.basename(dir), ...rest];
      dir = up;
    }
  }
  return where;
}

function isDirectory(where) {
  try {
    return fs.statSync(where).isDirectory();
  } catch {
    return false;
  }
}

function remember(snapshots, callID, files) {
  snapshots.set(callID, files);
  while (snapshots.size > MAX_SNAPSHOTS) snapshots.delete(snapshots.keys().next().value);
}

// Each file git reports changed or untracked, by absolute path, with its status, mtime and size
// (a file changed again while dirty counts as changed); null when git cannot tell.
function dirty(topLevel) {
  let out;
  try {
    out = git(topLevel, "status", "--porcelain=v1", "-z", "--untracked-files=all");
  } catch {
    return null;
  }
  const entries = out.toString("utf8").split("\0");
  const found = new Map();
  for (let i = 0; i < entries.length; i += 1) {
    const entry = entries[i];
    if (entry.length < 4) continue;
    const status = entry.slice(0, 2);
    const names = [entry.slice(3)];
    if ("RC".includes(status[0])) names.push(entries[++i]); // a rename or copy: then its source
    for (const name of names) {
      if (!name) continue;
      const where = path.join(topLevel, name);
      let seen = `${status} - -`;
      try {
        const info = fs.lstatSync(where);
        seen = `${status} ${info.mtimeMs} ${info.size}`;
      } catch {
        // deleted: its status says so
      }
      found.set(where, seen);
    }
  }
  return found;
}

// The files a command changed: dirty now and not as they were, or dirty before and clean now
// (a `git checkout -- file` is a write too).
function changedSince(before, now) {
  const changed = new Set();
  for (const [where, seen] of now) if (before.get(where) !== seen) changed.add(where);
  for (const where of before.keys()) if (!now.has(where)) changed.add(where);
  return [...changed].sort();
}
