// ConfigError lives with the settings that raise it (settings/setting.ts); this path stays for
// the server's modules and the package's entry that import it from here.
export { ConfigError } from './settings/setting.js';
