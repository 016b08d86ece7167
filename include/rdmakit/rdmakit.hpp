// Everything of the core API in one include.
#pragma once

#include "rdmakit/completion.hpp"
#include "rdmakit/connection.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/log.hpp"
#include "rdmakit/memory.hpp"
#include "rdmakit/options.hpp"
#include "rdmakit/transports.hpp"
#include "rdmakit/version.hpp"
