#pragma once

namespace rdmakit {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
}  // namespace rdmakit
