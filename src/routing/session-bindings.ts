// Session bindings that outlive a change of the workers: a session's worker, once chosen, is
// remembered where every replica reads it (first binding wins), so that a worker joining does
// not move the sessions it would win by hashing. The store is the router's (Redis); the
// session policy reads what was looked up for the request and says what it chose.

/** A pool's side: a session is bound to one worker per side. */
export type BindingRole = 'prefill' | 'decode';

/** The workers a session is bound to, by side, as looked up for one request (by worker key). */
export type SessionBinding = Partial<Record<BindingRole, string>>;

/**
 * Where session bindings are kept (`RedisSessionBindings` for replicas sharing a Redis). Both
 * calls are best effort: a store that cannot be reached answers no binding, and routing goes by
 * hashing as without one.
 */
export interface SessionBindingStore {
  /** The session's bindings, their time to live refreshed (they last while the session is used). */
  lookup(sessionKey: string): Promise<SessionBinding>;
  /**
   * Binds the session's `role` side to `worker` unless it is bound already (the first binding
   * wins: another replica's, made meanwhile, stays), or rebinds it when it is still bound to
   * `replacing` (a worker that left the rotation). Fire and forget.
   */
  bind(sessionKey: string, role: BindingRole, worker: string, replacing: string | undefined): void;
}

/** What the session policy of one pool side needs of the bindings: that side, the store, and a worker's key. */
export interface SessionBindingView<W> {
  readonly role: BindingRole;
  readonly store: SessionBindingStore;
  /** A worker's key in the store, the same on every replica (its URL). */
  keyOf(worker: W): string;
}
