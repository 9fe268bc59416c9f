// The pools moved to routing/ (a worker's record is the scheduler's, below the flow); this
// path stays for the imports that name it.
export * from '../routing/worker-pool.js';
