//! The directory of this module's file, in either build: the ESM build reads `import.meta.url`;
//! the CommonJS build (dist/cjs, `scripts/build-cjs.mjs`) has it replaced with `__filename`'s
//! URL, `import.meta` being a syntax error in CommonJS.

import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

// @ts-ignore TS1343 in the CommonJS build, whose output build-cjs.mjs rewrites (see above).
export const MODULE_DIR: string = dirname(fileURLToPath(import.meta.url));
