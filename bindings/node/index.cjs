'use strict';
module.exports = require('./lib/dlock.cjs');
