"""An independent CRC-32 (Ethernet FCS) for the link tests: bit-serial, reflected polynomial
0xEDB88320, init and final XOR 0xFFFFFFFF — written from the standard, not from the code
under test."""


def crc32_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
